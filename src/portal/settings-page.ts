import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { auditOriginOf } from '../audit/context.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { BUILTIN_CLI_CLIENT_ID } from '../ids.js';
import {
  changeName,
  changePassword,
  connectedApps,
  liveSessions,
  revokeConnectedApp,
  signOutSessions,
} from '../accounts/self-service.js';
import { deleteAccount, deletionPreview } from '../accounts/account-deletion.js';
import { twoFactorStatus } from '../accounts/two-factor.js';
import { SESSION_COOKIE, sessionCookieOptions } from '../auth/session.js';
import { deleteAccountCard, showDeleted, type DeleteErrors } from './delete-account-card.js';
import { html, verifyCsrfField } from '../page-kit/html.js';
import { requirePageSession } from '../auth/page-session.js';
import {
  alert,
  applyErrorHeaders,
  clientError,
  errorText,
  field,
  formValue,
  parseForm,
  postForm,
  queryValue,
  show,
  type Notice,
  PASSWORD_HINT,
} from './components.js';

// The account page (/account/settings): change the name, change the password (the
// current one required; every other session signed out and every connected app disconnected, CONTRACT
// §7), the live sessions (sign out one, or all others) and the connected apps (OAuth grants: which app,
// which resource, for which organization, last used; revoke). API tokens are not made here: the
// interface document keeps API-key management out of the portal (Authentication 2).

const BASE = '/account/settings';
const nameBody = z.object({
  name: z.string().trim().min(1, 'Enter a name.').max(200, 'At most 200 characters.'),
});
const handle = z.string().regex(/^[a-z]{3}_[A-Za-z0-9_-]{1,80}$/);
const stamp = (d: Date) => d.toISOString().slice(0, 16).replace('T', ' ');
const RESOURCES: Record<string, string> = { model: 'Model API', platform: 'Projects (MCP)' };

const NOTICES: Record<string, Notice> = {
  name: { kind: 'ok', text: 'Name changed.' },
  session: { kind: 'ok', text: 'That session was signed out.' },
  others: { kind: 'ok', text: 'Every other session was signed out.' },
  app: { kind: 'ok', text: 'App disconnected. Its tokens stop working now.' },
};

interface Errors extends DeleteErrors {
  name?: string;
  current_password?: string;
  password?: string;
}

export function settingsPageRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);
  const { db } = deps;

  async function page(
    req: Request,
    res: Response,
    opts: { notice?: Notice | null; status?: number; errors?: Errors } = {},
  ) {
    const p = principalOf(req);
    if (p.kind !== 'session') throw new Error('pages run on sessions only');
    const errors = opts.errors ?? {};
    const [list, apps, preview, twoFactor] = await Promise.all([
      liveSessions(db, p.userId),
      connectedApps(db, p.userId),
      deletionPreview(db, p.userId),
      twoFactorStatus(deps, p.userId),
    ]);
    // The first field in error takes the focus (WCAG 3.3.1: the person lands where the problem is).
    const first = (['name', 'current_password', 'password', 'confirm_password', 'code'] as const).find(
      (k) => errors[k],
    );
    const deleteCard = deleteAccountCard(req, res, {
      preview,
      twoFactor: twoFactor.enabled,
      errors,
      focus: first === 'confirm_password' || first === 'code' ? first : undefined,
    });

    const nameCard = html`<section class="card" aria-labelledby="h-name"><h2 id="h-name">Name</h2>${postForm(
      req,
      res,
      `${BASE}/name`,
      html`${field({ label: 'Name', name: 'name', value: formValue(req, 'name', 200) || p.name, autocomplete: 'name', required: true, maxlength: 200, error: errors.name, autofocus: first === 'name' })}
<div class="actions"><button type="submit" class="secondary">Save name</button></div>`,
    )}<p class="muted">E-mail: ${p.email}</p></section>`;

    const passwordCard = html`<section class="card" aria-labelledby="h-password"><h2 id="h-password">Password</h2>
<p class="muted">Changing it signs out every other session and disconnects every app you connected. API tokens keep working.</p>${postForm(
      req,
      res,
      `${BASE}/password`,
      html`${field({ label: 'Current password', name: 'current_password', type: 'password', autocomplete: 'current-password', required: true, error: errors.current_password, autofocus: first === 'current_password' })}
${field({ label: 'New password', name: 'password', type: 'password', autocomplete: 'new-password', required: true, hint: PASSWORD_HINT, error: errors.password, autofocus: first === 'password' })}
<div class="actions"><button type="submit" class="secondary">Change password</button></div>`,
    )}</section>`;

    const sessionsCard = html`<section class="card" aria-labelledby="h-sessions"><h2 id="h-sessions">Sessions</h2>
<div class="scroll" role="region" tabindex="0" aria-labelledby="h-sessions"><table aria-labelledby="h-sessions"><thead><tr><th scope="col">Signed in (UTC)</th><th scope="col">Expires</th><th scope="col"><span class="sr">Action</span></th></tr></thead>
<tbody>${list.map(
      (s) =>
        html`<tr><td>${stamp(s.createdAt)}${s.id === p.sessionId ? html` <span class="badge ok">this browser</span>` : ''}</td><td>${stamp(s.expiresAt)}</td><td>${
          s.id === p.sessionId
            ? ''
            : postForm(
                req,
                res,
                `${BASE}/sessions/${s.id}/revoke`,
                html`<button type="submit" class="danger" aria-label="Sign out the session of ${stamp(s.createdAt)}">Sign out</button>`,
                '',
              )
        }</td></tr>`,
    )}</tbody></table></div>
${list.length > 1 ? postForm(req, res, `${BASE}/sessions/revoke-others`, html`<div class="actions"><button type="submit" class="danger">Sign out every other session</button></div>`) : ''}
<p><a href="/account/audit-log">Your account log</a>: every sign-in, failed sign-in and change to your account.</p></section>`;

    const appsCard = html`<section class="card" aria-labelledby="h-apps"><h2 id="h-apps">Connected apps</h2>
${
  apps.length === 0
    ? html`<p class="muted">No app is connected. Apps connect through “Sign in with svc” (OAuth), and the terminal through the device page.</p>`
    : html`<table class="stack" aria-labelledby="h-apps"><thead><tr><th scope="col">App</th><th scope="col">Access</th><th scope="col">Organization</th><th scope="col">Last used (UTC)</th><th scope="col"><span class="sr">Action</span></th></tr></thead>
<tbody>${apps.map((a) => {
        const name = a.clientId === BUILTIN_CLI_CLIENT_ID ? 'svc terminal' : (a.clientName ?? a.clientId);
        return html`<tr><td>${name}<div class="sub">connected ${stamp(a.connectedAt)}</div></td><td data-label="Access">${RESOURCES[a.resource] ?? a.resource}</td><td data-label="Organization">${a.orgName}</td><td data-label="Last used (UTC)">${stamp(a.lastUsedAt)}</td>
<td>${postForm(req, res, `${BASE}/apps/${a.grantId}/revoke`, html`<button type="submit" class="danger" aria-label="Disconnect ${name} (${RESOURCES[a.resource] ?? a.resource})">Disconnect</button>`, '')}</td></tr>`;
      })}</tbody></table>`
}</section>`;

    show(req, res, {
      title: 'Account settings',
      status: opts.status ?? 200,
      body: html`<h1>Account settings</h1>${alert(opts.notice ?? NOTICES[queryValue(req, 'notice')] ?? null)}
<div class="grid">${nameCard}${passwordCard}</div>${sessionsCard}${appsCard}${deleteCard}`,
    });
  }

  router.get(BASE, session, (req, res) => page(req, res));

  /** A POST of this page: CSRF first; a person's mistake re-renders the page with it, else the error page. */
  function action(path: string, act: (req: Request, res: Response) => Promise<void>) {
    router.post(`${BASE}${path}`, deps.limits.perIp, session, async (req, res) => {
      try {
        verifyCsrfField(req);
        await act(req, res);
      } catch (caught) {
        const err = clientError(caught);
        applyErrorHeaders(res, err);
        await page(req, res, { status: err.status, notice: { kind: 'error', text: errorText(err) } });
      }
    });
  }

  action('/name', async (req, res) => {
    const parsed = parseForm(nameBody, req.body);
    if (!parsed.ok) return page(req, res, { status: 400, errors: { name: parsed.errors.name } });
    await changeName(db, principalOf(req).userId, parsed.data.name);
    res.redirect(303, `${BASE}?notice=name`);
  });

  action('/password', async (req, res) => {
    const p = principalOf(req);
    if (p.kind !== 'session') throw new Error('pages run on sessions only');
    try {
      const revoked = await changePassword(deps, {
        userId: p.userId,
        sessionId: p.sessionId,
        current: formValue(req, 'current_password', 1024),
        next: formValue(req, 'password', 1024),
        origin: auditOriginOf(req),
      });
      const tokens = revoked.activeApiTokens;
      await page(req, res, {
        notice: {
          kind: 'ok',
          text: `Password changed. ${revoked.sessionsRevoked} other session(s) signed out and ${revoked.grantsRevoked} app connection(s) revoked.${tokens ? ` Your ${tokens} API token(s) keep working; list them and revoke any you do not trust with “svc keys” in a terminal, or the API.` : ''}`,
        },
      });
    } catch (caught) {
      const err = clientError(caught);
      if (err.code === 'WRONG_PASSWORD')
        return page(req, res, {
          status: 400,
          errors: { current_password: 'That is not your current password.' },
        });
      if (err.code === 'WEAK_PASSWORD')
        return page(req, res, { status: 400, errors: { password: errorText(err) } });
      throw err;
    }
  });

  action('/sessions/revoke-others', async (req, res) => {
    const p = principalOf(req);
    if (p.kind !== 'session') throw new Error('pages run on sessions only');
    await signOutSessions(db, p.userId, { allBut: p.sessionId }, auditOriginOf(req));
    res.redirect(303, `${BASE}?notice=others`);
  });

  action('/sessions/:sessionId/revoke', async (req, res) => {
    const id = handle.safeParse(req.params.sessionId);
    if (id.success)
      await signOutSessions(db, principalOf(req).userId, { sessionId: id.data }, auditOriginOf(req));
    res.redirect(303, `${BASE}?notice=session`);
  });

  action('/apps/:grantId/revoke', async (req, res) => {
    const id = handle.safeParse(req.params.grantId);
    if (id.success) await revokeConnectedApp(db, principalOf(req).userId, id.data, auditOriginOf(req));
    res.redirect(303, `${BASE}?notice=app`);
  });

  // Delete the account (docs/accounts.md "Deleting an account"): the password, and the 2FA code when on,
  // asked again; a blocker (an organization shared with others, a debt, a renewing subscription) is
  // shown in the card, which lists them before anything is asked.
  action('/delete', async (req, res) => {
    try {
      const code = formValue(req, 'code', 64).trim();
      const result = await deleteAccount(deps, {
        userId: principalOf(req).userId,
        password: formValue(req, 'confirm_password', 1024),
        ...(code ? { code } : {}),
        origin: auditOriginOf(req),
      });
      res.clearCookie(SESSION_COOKIE, { ...sessionCookieOptions(0), maxAge: undefined });
      showDeleted(req, res, result.forfeitedCredits, result.deletedOrganizations);
    } catch (caught) {
      const err = clientError(caught);
      if (err.code === 'WRONG_PASSWORD')
        return page(req, res, { status: 400, errors: { confirm_password: 'That is not your password.' } });
      if (err.code === 'CODE_REQUIRED')
        return page(req, res, { status: 400, errors: { code: errorText(err) } });
      // With 2FA on, one answer whichever was wrong (src/accounts/reauthentication.ts): shown on both fields.
      if (err.code === 'WRONG_PASSWORD_OR_CODE')
        return page(req, res, {
          status: 400,
          errors: { confirm_password: 'The password or the code is not right.', code: 'Enter both again.' },
        });
      throw err;
    }
  });

  return router;
}
