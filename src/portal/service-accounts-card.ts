import type { Deps } from '../deps.js';
import { listServiceAccounts } from '../service-accounts/service.js';
import { html } from '../page-kit/html.js';

// The organization's service accounts on its members page, as principals beside the people: name, role
// and when their credential was last used (CONTRACT §11 "Service accounts"). The owner sees them, as the
// API lists them to the owner only. No key actions: the portal has no API-key management (interface
// document); they are created, minted and deleted through the API and `svc service-accounts`.

const stamp = (d: Date | null) => (d ? d.toISOString().slice(0, 16).replace('T', ' ') : 'never');

export async function serviceAccountsCard(deps: Pick<Deps, 'db'>, orgKey: string) {
  const accounts = await listServiceAccounts(deps.db, orgKey);
  const rows = accounts.map(
    ({ account, credential }) =>
      html`<tr><td data-label="Service account">${account.name}<div class="sub"><code>${account.id}</code></div></td><td data-label="Role">${account.role}</td><td data-label="Last used">${credential ? stamp(credential.lastUsedAt) : 'no credential'}</td></tr>`,
  );
  return html`<section class="card" aria-labelledby="h-service-accounts"><h2 id="h-service-accounts">Service accounts</h2>
<p class="muted">Principals for scripts and CI, billed to this organization. Manage them with <code>svc service-accounts</code> or the API.</p>${
    accounts.length
      ? html`<table class="stack" aria-labelledby="h-service-accounts"><thead><tr><th scope="col">Service account</th><th scope="col">Role</th><th scope="col">Last used</th></tr></thead><tbody>${rows}</tbody></table>`
      : html`<p>None yet.</p>`
  }</section>`;
}
