import type { Request, Response } from 'express';
import type { Deps } from '../deps.js';
import { principalOf } from '../auth/principal.js';
import { twoFactorStatus } from './services.js';
import { html, type SafeHtml } from '../page-kit/html.js';
import { alert, field, postForm, type Notice } from './components.js';

// The two-factor card of the dashboard in its resting state. The dashboard shows it; the two-factor
// routes (./two-factor-page.ts) show it again after a failed step, inside the dashboard they render, so
// the card sits below both (docs/architecture.md).

/** The 2FA card in its resting state: enabled (with a disable form) or not (with a set-up button). */
export async function twoFactorCard(
  deps: Deps,
  req: Request,
  res: Response,
  opts: { notice?: Notice | null; error?: string } = {},
): Promise<SafeHtml> {
  const p = principalOf(req);
  const status = await twoFactorStatus(deps, p.userId);
  const body = status.enabled
    ? html`<p><span class="badge ok">on</span> Sign-in asks for a code from your authenticator app.</p>
<p class="muted">${status.recoveryCodesRemaining} recovery codes left.</p>
${postForm(
  req,
  res,
  '/account/2fa/disable',
  html`${field({ label: 'Turn off with a code', name: 'code', className: 'code', autocomplete: 'one-time-code', required: true, maxlength: 64, hint: 'from your app, or a recovery code', error: opts.error, autofocus: Boolean(opts.error) })}
<div class="actions"><button type="submit" class="danger">Turn off two-factor</button></div>`,
)}`
    : html`<p><span class="badge warn">off</span> Protect your account with a code from an authenticator app.</p>
${postForm(req, res, '/account/2fa/setup', html`<div class="actions"><button type="submit">Set up two-factor</button></div>`)}`;
  return html`<section class="card" aria-labelledby="h-2fa"><h2 id="h-2fa">Two-factor authentication</h2>${alert(opts.notice)}${body}</section>`;
}
