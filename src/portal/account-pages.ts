import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { confirmPasswordReset, registerAndNotify, requestPasswordReset, verifyEmail } from './services.js';
import { html, verifyCsrfField } from '../page-kit/html.js';
import { resetLinkIsLive } from './reset-link.js';
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
  PASSWORD_HINT,
} from './components.js';

// Registration, the e-mail verification landing and password reset (CONTRACT §4). Each page calls the
// service behind the matching /v1 route, so the password rule, the "same answer whatever the address"
// of reset requests, token lifetimes and single use are enforced in one place.

const registerBody = z.object({
  name: z.string().trim().min(1, 'Enter your name.').max(200),
  email: z.string().trim().max(320).pipe(z.email('Enter a valid e-mail address.')),
  password: z.string().min(1, 'Choose a password.').max(1024),
});

const resetRequestBody = z.object({
  email: z.string().trim().max(320).pipe(z.email('Enter a valid e-mail address.')),
});
const resetConfirmBody = z.object({
  token: z.string().min(1).max(512),
  password: z.string().min(1, 'Choose a new password.').max(1024),
});

const DEAD_RESET_LINK: Notice = {
  kind: 'error',
  text: 'This reset link is not valid any more (it was used already or has expired). Ask for a new one.',
};

export function accountPageRoutes(deps: Deps, _auth: Auth): Router {
  const router = Router();
  const perIp = deps.limits.perIp;

  function registerView(
    req: Request,
    res: Response,
    opts: {
      name?: string;
      email?: string;
      errors?: Record<string, string>;
      notice?: Notice | null;
      status?: number;
    } = {},
  ) {
    const form = postForm(
      req,
      res,
      '/account/register',
      html`${field({ label: 'Name', name: 'name', value: opts.name ?? '', autocomplete: 'name', required: true, autofocus: true, error: opts.errors?.name })}
${field({ label: 'E-mail', name: 'email', type: 'email', value: opts.email ?? '', autocomplete: 'email', required: true, error: opts.errors?.email })}
${field({ label: 'Password', name: 'password', type: 'password', autocomplete: 'new-password', required: true, hint: PASSWORD_HINT, error: opts.errors?.password })}
<div class="actions"><button type="submit">Create account</button></div>`,
    );
    show(req, res, {
      title: 'Create an account',
      narrow: true,
      status: opts.status ?? 200,
      body: html`<div class="card"><h1>Create an account</h1>${alert(opts.notice)}${form}</div>
<p class="muted">Already have one? <a href="/account/login">Sign in</a>.</p>`,
    });
  }

  router.get('/account/register', (req, res) => registerView(req, res));

  router.post('/account/register', perIp, async (req, res) => {
    const name = formValue(req, 'name', 200);
    const email = formValue(req, 'email', 320);
    try {
      verifyCsrfField(req);
      const parsed = parseForm(registerBody, req.body);
      if (!parsed.ok) return registerView(req, res, { name, email, errors: parsed.errors, status: 400 });
      await registerAndNotify(deps, parsed.data);
      res.redirect(303, '/account/login?registered=1');
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      const errors: Record<string, string> = {};
      if (err.code === 'WEAK_PASSWORD') errors.password = errorText(err);
      else if (err.code === 'EMAIL_TAKEN')
        errors.email = 'An account with this e-mail already exists. Sign in or reset your password.';
      const notice: Notice | null = Object.keys(errors).length
        ? null
        : { kind: 'error', text: errorText(err) };
      registerView(req, res, { name, email, errors, notice, status: err.status });
    }
  });

  // The link in the verification mail ({V2_URL}/account/verify?token=…). A GET verifies: the token is
  // single-use and only proves the mailbox, so a prefetching mail scanner cannot do harm with it.
  router.get('/account/verify', perIp, async (req, res) => {
    const token = queryValue(req, 'token', 512);
    let notice: Notice;
    let status = 200;
    if (!token) {
      notice = { kind: 'error', text: 'This link is incomplete. Open the link from the e-mail again.' };
      status = 400;
    } else {
      try {
        await verifyEmail(deps, token);
        notice = { kind: 'ok', text: 'Your e-mail address is verified. Thank you!' };
      } catch (caught) {
        const err = clientError(caught);
        if (req.principal?.emailVerified && err.status !== 429) {
          // Signed in with an address already verified: a used link only means it worked before.
          notice = { kind: 'ok', text: 'Your e-mail address is already verified.' };
        } else {
          applyErrorHeaders(res, err);
          status = err.status;
          notice = {
            kind: 'error',
            text:
              err.status === 429
                ? errorText(err)
                : 'This link is not valid any more (it was used already or has expired). Sign in to send a new one.',
          };
        }
      }
    }
    const signedIn = !!req.principal;
    show(req, res, {
      title: 'E-mail verification',
      narrow: true,
      status,
      body: html`<div class="card"><h1>E-mail verification</h1>${alert(notice)}
<p><a href="${signedIn ? '/account' : '/account/login'}">${signedIn ? 'Go to your account' : 'Sign in'}</a></p></div>`,
    });
  });

  function resetRequestView(
    req: Request,
    res: Response,
    opts: { email?: string; notice?: Notice | null; errors?: Record<string, string>; status?: number } = {},
  ) {
    const form = postForm(
      req,
      res,
      '/account/reset',
      html`${field({ label: 'E-mail', name: 'email', type: 'email', value: opts.email ?? '', autocomplete: 'email', required: true, autofocus: true, error: opts.errors?.email })}
<div class="actions"><button type="submit">Send reset link</button><a href="/account/login">Back to sign in</a></div>`,
    );
    show(req, res, {
      title: 'Reset your password',
      narrow: true,
      status: opts.status ?? 200,
      body: html`<div class="card"><h1>Reset your password</h1><p>We will e-mail you a link to choose a new password.</p>${alert(opts.notice)}${form}</div>`,
    });
  }

  function resetConfirmView(
    req: Request,
    res: Response,
    opts: { token: string; notice?: Notice | null; errors?: Record<string, string>; status?: number },
  ) {
    const form = postForm(
      req,
      res,
      '/account/reset/confirm',
      html`${hidden('token', opts.token)}
${field({ label: 'New password', name: 'password', type: 'password', autocomplete: 'new-password', required: true, autofocus: true, hint: PASSWORD_HINT, error: opts.errors?.password })}
<div class="actions"><button type="submit">Set new password</button></div>`,
    );
    show(req, res, {
      title: 'Choose a new password',
      narrow: true,
      status: opts.status ?? 200,
      body: html`<div class="card"><h1>Choose a new password</h1><p class="muted">Every device signed in to your account will be signed out.</p>${alert(opts.notice)}${form}</div>`,
    });
  }

  router.get('/account/reset', async (req, res) => {
    const token = queryValue(req, 'token', 512);
    // A used or expired link says so when opened, before anyone types a new password.
    if (token && !(await resetLinkIsLive(deps, token)))
      return resetRequestView(req, res, { notice: DEAD_RESET_LINK, status: 400 });
    if (token) return resetConfirmView(req, res, { token });
    const sent = queryValue(req, 'sent') === '1';
    resetRequestView(req, res, {
      notice: sent
        ? {
            kind: 'ok',
            text: 'If an account exists for that address, we sent it a link. The link works for one hour.',
          }
        : null,
    });
  });

  router.post('/account/reset', perIp, async (req, res) => {
    const email = formValue(req, 'email', 320);
    try {
      verifyCsrfField(req);
      const parsed = parseForm(resetRequestBody, req.body);
      if (!parsed.ok) return resetRequestView(req, res, { email, errors: parsed.errors, status: 400 });
      await requestPasswordReset(deps, parsed.data.email);
      // The same answer whatever the address (CONTRACT §4: no account enumeration).
      res.redirect(303, '/account/reset?sent=1');
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      resetRequestView(req, res, {
        email,
        notice: { kind: 'error', text: errorText(err) },
        status: err.status,
      });
    }
  });

  router.post('/account/reset/confirm', perIp, async (req, res) => {
    const token = formValue(req, 'token', 512);
    try {
      verifyCsrfField(req);
      const parsed = parseForm(resetConfirmBody, req.body);
      if (!parsed.ok) {
        if (!token) return res.redirect(303, '/account/reset');
        return resetConfirmView(req, res, { token, errors: parsed.errors, status: 400 });
      }
      const { revoked } = await confirmPasswordReset(deps, {
        token: parsed.data.token,
        password: parsed.data.password,
      });
      res.redirect(303, `/account/login?reset=1&api_tokens=${revoked.activeApiTokens}`);
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      if (err.code === 'WEAK_PASSWORD')
        return resetConfirmView(req, res, { token, errors: { password: errorText(err) }, status: 400 });
      if (err.status === 403 || err.status === 429)
        return resetConfirmView(req, res, {
          token,
          notice: { kind: 'error', text: errorText(err) },
          status: err.status,
        });
      resetRequestView(req, res, { notice: DEAD_RESET_LINK, status: err.status });
    }
  });

  return router;
}
