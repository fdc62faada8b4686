import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { auditOriginOf } from '../audit/context.js';
import type { Auth } from '../auth/principal.js';
import { revokeSession, SESSION_COOKIE, SESSION_TTL_SECONDS, sessionCookieOptions } from '../auth/session.js';
import { completeTwoFactorLogin, loginWithPassword } from './services.js';
import { html, rotateCsrfToken, safeReturnTo, verifyCsrfField } from '../page-kit/html.js';
import { requirePageSession } from '../auth/page-session.js';
import {
  alert,
  applyErrorHeaders,
  clientError,
  errorText,
  field,
  formValue,
  hidden,
  type Notice,
  parseForm,
  postForm,
  queryValue,
  show,
} from './components.js';

// Sign-in (CONTRACT §4): e-mail and password, then — when the account has 2FA — a second form whose
// `code` takes a TOTP code or a recovery code. Both steps call the same services as POST /v1/login and
// /v1/2fa/login, so the limits, the equal answer for a wrong e-mail or password, and the challenge
// rules (5 min, 5 wrong codes) are the API's own. The session cookie is set exactly like the API's.

const loginBody = z.object({
  email: z.string().trim().min(1, 'Enter your e-mail address.').max(320),
  password: z.string().min(1, 'Enter your password.').max(1024),
  return_to: z.string().max(2048).optional(),
});

const twoFactorBody = z.object({
  challenge_token: z.string().min(1).max(512),
  code: z.string().trim().min(1, 'Enter the code from your authenticator app or a recovery code.').max(64),
  return_to: z.string().max(2048).optional(),
});

const NOTICES: Record<string, Notice> = {
  registered: {
    kind: 'ok',
    text: 'Account created. We sent you an e-mail with a link to verify your address; open it, then sign in.',
  },
  reset: { kind: 'ok', text: 'Your password was changed. Sign in with the new one.' },
  signed_out: { kind: 'info', text: 'You are signed out.' },
  verified: { kind: 'ok', text: 'Your e-mail address is verified. Sign in to continue.' },
};

/**
 * After a reset (CONTRACT §7): what was revoked, and how many svc_ tokens still work (the reset page
 * passes the count, `api_tokens`; it is only a number shown back, so a forged one misleads nobody but
 * the forger).
 */
function resetNotice(req: Request): Notice {
  const active = /^\d{1,6}$/.test(queryValue(req, 'api_tokens')) ? Number(queryValue(req, 'api_tokens')) : 0;
  const tokens =
    active === 0
      ? ''
      : ` ${active === 1 ? '1 API token (svc_…) is' : `${active} API tokens (svc_…) are`} still active: after signing in, revoke any you do not trust on your account page.`;
  return {
    kind: 'ok',
    text: `Your password was changed. Every session was signed out and every connected app disconnected.${tokens} Sign in with the new password.`,
  };
}

/** Signs the browser in: the same cookie, name and attributes as the API (src/auth/session.ts). */
export function setSessionCookie(res: Response, token: string): void {
  res.cookie(SESSION_COOKIE, token, sessionCookieOptions(SESSION_TTL_SECONDS));
  rotateCsrfToken(res);
}

export function signInRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const perIp = deps.limits.perIp;

  function loginView(
    req: Request,
    res: Response,
    opts: {
      email?: string;
      returnTo?: string | null;
      notice?: Notice | null;
      errors?: Record<string, string>;
      status?: number;
    },
  ) {
    const returnTo = safeReturnTo(opts.returnTo);
    const form = postForm(
      req,
      res,
      '/account/login',
      html`${hidden('return_to', returnTo)}
${field({ label: 'E-mail', name: 'email', type: 'email', value: opts.email ?? '', autocomplete: 'username', required: true, autofocus: !opts.email, error: opts.errors?.email })}
${field({ label: 'Password', name: 'password', type: 'password', autocomplete: 'current-password', required: true, autofocus: !!opts.email, error: opts.errors?.password })}
<div class="actions"><button type="submit">Sign in</button><a href="/account/reset">Forgot your password?</a></div>`,
    );
    show(req, res, {
      title: 'Sign in',
      narrow: true,
      status: opts.status ?? 200,
      body: html`<div class="card"><h1>Sign in</h1>${alert(opts.notice)}${form}</div>
<p class="muted">New here? <a href="/account/register">Create an account</a>.</p>`,
    });
  }

  function twoFactorView(
    req: Request,
    res: Response,
    opts: {
      challengeToken: string;
      returnTo?: string | null;
      notice?: Notice | null;
      /** A code refused: shown on the field (which has the focus). */
      error?: string;
      status?: number;
    },
  ) {
    const form = postForm(
      req,
      res,
      '/account/login/2fa',
      html`${hidden('challenge_token', opts.challengeToken)}${hidden('return_to', safeReturnTo(opts.returnTo))}
${field({ label: 'Code', name: 'code', className: 'code', autocomplete: 'one-time-code', inputmode: 'text', required: true, autofocus: true, maxlength: 64, hint: '6 digits from your app, or a recovery code', error: opts.error })}
<div class="actions"><button type="submit">Verify</button><a href="/account/login">Start over</a></div>`,
    );
    show(req, res, {
      title: 'Two-factor authentication',
      narrow: true,
      status: opts.status ?? 200,
      body: html`<div class="card"><h1>Two-factor authentication</h1>
<p>Enter the code from your authenticator app. Lost your device? Use one of your recovery codes.</p>${alert(opts.notice)}${form}</div>`,
    });
  }

  /** After signing in: back where the visitor was going (same origin only), else the dashboard. */
  const landing = (returnTo: string | undefined) => safeReturnTo(returnTo) ?? '/account';

  router.get('/account/login', async (req, res) => {
    const returnTo = queryValue(req, 'return_to');
    const current = await auth.resolve(req).catch(() => null);
    if (current?.kind === 'session') return res.redirect(303, landing(returnTo));
    const notice = Object.keys(NOTICES).find((k) => queryValue(req, k) === '1');
    loginView(req, res, {
      returnTo,
      notice: notice === 'reset' ? resetNotice(req) : notice ? NOTICES[notice] : null,
    });
  });

  router.post('/account/login', perIp, async (req, res) => {
    const email = formValue(req, 'email', 320);
    const returnTo = formValue(req, 'return_to', 2048) || null;
    try {
      verifyCsrfField(req);
      const parsed = parseForm(loginBody, req.body);
      if (!parsed.ok) return loginView(req, res, { email, returnTo, errors: parsed.errors, status: 400 });
      const result = await loginWithPassword(deps, {
        email: parsed.data.email,
        password: parsed.data.password,
        origin: auditOriginOf(req),
      });
      if (result.kind === 'challenge')
        return twoFactorView(req, res, { challengeToken: result.challengeToken, returnTo });
      setSessionCookie(res, result.token);
      res.redirect(303, landing(parsed.data.return_to));
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      const text =
        err.code === 'INVALID_CREDENTIALS'
          ? 'That e-mail and password do not match an account.'
          : errorText(err);
      loginView(req, res, { email, returnTo, notice: { kind: 'error', text }, status: err.status });
    }
  });

  router.post('/account/login/2fa', perIp, async (req, res) => {
    const challengeToken = formValue(req, 'challenge_token', 512);
    const returnTo = formValue(req, 'return_to', 2048) || null;
    try {
      verifyCsrfField(req);
      const parsed = parseForm(twoFactorBody, req.body);
      if (!parsed.ok) {
        if (!challengeToken) return res.redirect(303, '/account/login');
        return twoFactorView(req, res, {
          challengeToken,
          returnTo,
          notice: { kind: 'error', text: Object.values(parsed.errors)[0]! },
          status: 400,
        });
      }
      const { token } = await completeTwoFactorLogin(deps, {
        challengeToken: parsed.data.challenge_token,
        code: parsed.data.code,
        origin: auditOriginOf(req),
      });
      setSessionCookie(res, token);
      res.redirect(303, landing(parsed.data.return_to));
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      // A burnt or expired challenge cannot be retried: start the sign-in again.
      if (err.code === 'INVALID_CHALLENGE') {
        return loginView(req, res, {
          returnTo,
          notice: { kind: 'error', text: 'This sign-in attempt has expired. Please sign in again.' },
          status: 401,
        });
      }
      twoFactorView(req, res, {
        challengeToken,
        returnTo,
        // A wrong or replayed code is said on the field; anything else (429) above the form.
        ...(err.code === 'INVALID_CODE'
          ? { error: errorText(err) }
          : { notice: { kind: 'error', text: errorText(err) } }),
        status: err.status,
      });
    }
  });

  router.post('/account/logout', requirePageSession(auth, { allowUnverified: true }), async (req, res) => {
    verifyCsrfField(req);
    const principal = req.principal;
    if (principal?.kind === 'session') await revokeSession(deps.db, principal.sessionId);
    res.clearCookie(SESSION_COOKIE, { ...sessionCookieOptions(0), maxAge: undefined });
    rotateCsrfToken(res);
    res.redirect(303, '/account/login?signed_out=1');
  });

  return router;
}
