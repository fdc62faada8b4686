import { html, type SafeHtml } from './template.js';

// The organization boundary of a third-party grant (CONTRACT §4, §7): on the consent and device pages,
// a client other than svc-cli acts only in the organization chosen there, unless the person ticks
// "all my organizations" (unticked by default). Both pages show the same field and read it the same way.

export const ALL_ORGANIZATIONS_FIELD = 'all_organizations';

/** The checkbox and the sentence that says what each choice grants. */
export function allOrganizationsField(): SafeHtml {
  return html`<div class="field">
<label><input type="checkbox" name="${ALL_ORGANIZATIONS_FIELD}" value="1"> All my organizations</label>
<p class="hint">Unticked, the application acts only in the organization chosen above: naming any other is refused. Ticked, it may act in every organization you belong to.</p>
</div>`;
}

/** True when the form ticked "all my organizations" (a checkbox posts its value only when ticked). */
export function allOrganizationsTicked(form: unknown): boolean {
  const value = (form as Record<string, unknown> | null | undefined)?.[ALL_ORGANIZATIONS_FIELD];
  return value === '1' || value === 'on' || value === 'true';
}
