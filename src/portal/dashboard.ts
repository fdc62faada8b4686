import { Router, type Request, type Response } from 'express';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { liveMemberships } from '../orgs/membership.js';
import { orgBalanceCredits } from '../billing/spend.js';
import { clientIdOf } from '../ids.js';
import { html, verifyCsrfField, type SafeHtml } from '../page-kit/html.js';
import { requirePageSession } from '../auth/page-session.js';
import { resendVerification } from './services.js';
import {
  alert,
  applyErrorHeaders,
  clientError,
  errorText,
  postForm,
  queryValue,
  show,
  type Notice,
} from './components.js';
import { twoFactorCard } from './two-factor-card.js';
import { tokensAndMoney } from './money.js';
import { getStartedCard } from './get-started-card.js';

// The dashboard (/account): who you are, whether the e-mail is verified (with a resend), two-factor
// authentication, your organizations (clients) with their token balance, and sign-out. The parts with
// their own forms live in their own files; this one only composes.

const NOTICES: Record<string, Notice> = {
  verify: {
    kind: 'info',
    text: 'Verify your e-mail address to use this page: open the link we sent you, or send a new one below.',
  },
  verification_sent: { kind: 'ok', text: 'We sent you a new verification link.' },
  two_factor_disabled: { kind: 'ok', text: 'Two-factor authentication is off.' },
  client_created: { kind: 'ok', text: 'Organization created.' },
  client_deleted: {
    kind: 'ok',
    text: 'Organization deleted. Its balance is back in your pool; any part held by calls still running is freed as each one settles.',
  },
  left: { kind: 'ok', text: 'You left the organization.' },
};

export function dashboardRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth, { allowUnverified: true });

  router.get('/account', session, async (req, res) => {
    await renderDashboard(deps, req, res, {});
  });

  // The resend of the verification mail (POST /v1/email/verify/resend's service; limited per account).
  router.post('/account/verify/resend', deps.limits.perIp, session, async (req, res) => {
    try {
      verifyCsrfField(req);
      await resendVerification(deps, principalOf(req).userId);
      res.redirect(303, '/account?notice=verification_sent');
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      await renderDashboard(deps, req, res, {
        status: err.status,
        notice: { kind: 'error', text: errorText(err) },
      });
    }
  });

  return router;
}

export interface DashboardExtras {
  notice?: Notice | null;
  status?: number;
  /** Replaces the 2FA card (the setup and recovery-code steps render into the dashboard). */
  twoFactor?: SafeHtml;
  /** Errors of the create-organization form. */
  clientError?: string;
}

export async function renderDashboard(
  deps: Deps,
  req: Request,
  res: Response,
  extras: DashboardExtras,
): Promise<void> {
  const p = principalOf(req);
  const noticeKey = queryValue(req, 'notice');
  const notice = extras.notice ?? NOTICES[noticeKey] ?? null;

  const profile = html`<section class="card" aria-labelledby="h-profile"><h2 id="h-profile">Profile</h2>
<p><strong>${p.name}</strong></p>
<p>${p.email} ${p.emailVerified ? html`<span class="badge ok">verified</span>` : html`<span class="badge warn">not verified</span>`}</p>
${
  p.emailVerified
    ? ''
    : html`<p class="muted">Open the link we e-mailed you to verify your address. Until then most of the service is locked.</p>
${postForm(req, res, '/account/verify/resend', html`<button type="submit" class="secondary">Send the link again</button>`)}`
}
${postForm(req, res, '/account/logout', html`<button type="submit" class="secondary">Sign out</button>`)}</section>`;

  const twoFactor = p.emailVerified ? (extras.twoFactor ?? (await twoFactorCard(deps, req, res))) : html``;
  const clients = p.emailVerified ? await clientsCard(deps, req, res, extras.clientError) : html``;
  const start = p.emailVerified
    ? await getStartedCard(deps, req, p, await liveMemberships(deps.db, p.userId))
    : null;

  show(req, res, {
    title: 'Your account',
    status: extras.status ?? 200,
    body: html`<h1>Your account</h1>${alert(notice)}${start ?? ''}
<div class="grid">${profile}${twoFactor}</div>
${clients}
${
  start
    ? ''
    : html`<section class="card" aria-labelledby="h-device"><h2 id="h-device">Connect a terminal</h2>
<p>Run <code>npx svc login</code> in your terminal (or <code>svc login</code> once installed), then enter the code it shows on <a href="/account/device">the device page</a>. The API: <a href="/docs">its reference</a>.</p></section>`
}`,
  });
}

async function clientsCard(deps: Deps, req: Request, res: Response, error?: string): Promise<SafeHtml> {
  const p = principalOf(req);
  const orgs = await liveMemberships(deps.db, p.userId);
  const rows = await Promise.all(
    orgs.map(async (o) => {
      // Viewers do not read balances (CONTRACT §8: live members, not viewers).
      const balance = o.role === 'viewer' ? null : await orgBalanceCredits(deps.db, o.orgKey);
      return html`<tr><td><a href="/account/clients/${clientIdOf(o.orgKey)}">${o.name}</a>${o.isDefault && o.ownerId === p.userId ? html` <span class="badge">default</span>` : ''}
<div class="sub"><code>${clientIdOf(o.orgKey)}</code></div></td><td>${o.role}</td><td>${balance === null ? html`<span class="muted">—</span>` : tokensAndMoney(balance)}</td></tr>`;
    }),
  );
  const create = postForm(
    req,
    res,
    '/account/clients',
    html`<div class="field"><label for="f-name">New organization</label>
<input id="f-name" name="name" type="text" required maxlength="200" autocomplete="off"${error ? html` aria-invalid="true" aria-describedby="f-name-error" autofocus` : ''}>
${error ? html`<div class="field-error" id="f-name-error">${error}</div>` : ''}</div>
<div class="actions"><button type="submit" class="secondary">Create organization</button></div>`,
  );
  return html`<section class="card" aria-labelledby="h-clients"><h2 id="h-clients">Organizations</h2>
<table><thead><tr><th scope="col">Name and id</th><th scope="col">Your role</th><th scope="col">Balance</th></tr></thead>
<tbody>${rows}</tbody></table>
<h3>Create one</h3>${create}</section>`;
}
