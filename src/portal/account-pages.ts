import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { auditOriginOf } from '../audit/context.js';
import type { Auth } from '../auth/principal.js';
import { confirmPasswordReset, registerAndNotify, requestPasswordReset, verifyEmail } from './services.js';
import { html, loginUrlFor, verifyCsrfField } from '../page-kit/html.js';
import { resetLinkIsLive } from './reset-link.js';
import { normaliseEmail } from '../accounts/users.js';
import { INVITATION_ACCEPT_PATH, invitationByToken, type InvitationView } from '../orgs/invitations.js';
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

/** Where an invitation's link leads: its page, where a signed-in, verified invitee joins. */
const acceptPathOf = (token: string) => `${INVITATION_ACCEPT_PATH}?token=${encodeURIComponent(token)}`;

/** What the registration form needs of the invitation it was opened from. */
interface Invited {
  token: string;
  email: string;
  orgName: string;
}

export function accountPageRoutes(deps: Deps, _auth: Auth): Router {
  const router = Router();
  const perIp = deps.limits.perIp;

  /** The open invitation a token opens, or null (none, used, revoked, expired: registration goes on without). */
  async function openInvitation(token: string): Promise<InvitationView | null> {
    if (!token) return null;
    const view = await invitationByToken(deps, token);
    return view?.status === 'pending' ? view : null;
  }

  const invitedOf = (view: InvitationView | null, token: string): Invited | null =>
    view ? { token, email: view.invitation.email, orgName: view.orgName } : null;

  function registerView(
    req: Request,
    res: Response,
    opts: {
      name?: string;
      email?: string;
      errors?: Record<string, string>;
      notice?: Notice | null;
      status?: number;
      invited?: Invited | null;
    } = {},
  ) {
    const { invited, errors } = opts;
    // An invitation's address is the one the invitation is for: shown, sent, not editable here. Another
    // address is another registration, without the invitation (the link below).
    const emailField = invited
      ? field({
          label: 'E-mail',
          name: 'email',
          type: 'email',
          value: invited.email,
          autocomplete: 'email',
          required: true,
          readonly: true,
          hint: 'the invited address',
          error: errors?.email,
        })
      : field({
          label: 'E-mail',
          name: 'email',
          type: 'email',
          value: opts.email ?? '',
          autocomplete: 'email',
          required: true,
          autofocus: Boolean(errors?.email && !errors.name),
          error: errors?.email,
        });
    // Focus on the first field in error, else on the first field.
    const focusName = !errors || Object.keys(errors).length === 0 || Boolean(errors.name);
    const focusPassword = Boolean(errors?.password && !errors.name && !errors.email);
    const form = postForm(
      req,
      res,
      '/account/register',
      html`${hidden('invitation', invited?.token)}${field({ label: 'Name', name: 'name', value: opts.name ?? '', autocomplete: 'name', required: true, autofocus: focusName, error: errors?.name })}
${emailField}
${field({ label: 'Password', name: 'password', type: 'password', autocomplete: 'new-password', required: true, hint: PASSWORD_HINT, autofocus: focusPassword, error: errors?.password })}
<div class="actions"><button type="submit">Create account</button></div>`,
    );
    const joining = invited
      ? html`<p class="alert info">You are invited to join <strong>${invited.orgName}</strong>. Create your account with ${invited.email}; once you verify the address from the mail we send, you join in one click.</p>`
      : '';
    const signIn = invited ? loginUrlFor(acceptPathOf(invited.token)) : '/account/login';
    show(req, res, {
      title: invited ? `Create an account to join ${invited.orgName}` : 'Create an account',
      narrow: true,
      status: opts.status ?? 200,
      body: html`<div class="card"><h1>Create an account</h1>${joining}${alert(opts.notice)}${form}</div>
<p class="muted">Already have one? <a href="${signIn}">Sign in</a>.</p>${
        invited
          ? html`<p class="muted">Another address? <a href="/account/register">Create an account without the invitation</a>.</p>`
          : ''
      }`,
    });
  }

  router.get('/account/register', async (req, res) => {
    const token = queryValue(req, 'invitation', 200);
    registerView(req, res, { invited: invitedOf(await openInvitation(token), token) });
  });

  router.post('/account/register', perIp, async (req, res) => {
    const token = formValue(req, 'invitation', 200);
    const invited = invitedOf(await openInvitation(token), token);
    const name = formValue(req, 'name', 200);
    const email = formValue(req, 'email', 320);
    try {
      verifyCsrfField(req);
      const parsed = parseForm(registerBody, req.body);
      if (!parsed.ok)
        return registerView(req, res, { name, email, invited, errors: parsed.errors, status: 400 });
      // The invitation goes on only with its own address (an address edited past the read-only field is
      // a registration without it).
      const carried = invited && normaliseEmail(parsed.data.email) === invited.email ? invited : null;
      await registerAndNotify(deps, parsed.data, carried ? { invitation: carried.token } : {});
      res.redirect(
        303,
        carried
          ? `/account/login?registered=1&return_to=${encodeURIComponent(acceptPathOf(carried.token))}`
          : '/account/login?registered=1',
      );
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
      registerView(req, res, { name, email, invited, errors, notice, status: err.status });
    }
  });

  // The link in the verification mail ({V2_URL}/account/verify?token=…). A GET verifies: the token is
  // single-use and only proves the mailbox, so a prefetching mail scanner cannot do harm with it.
  /**
   * After a verification from an invitation's registration: straight on to the invitation's page (its
   * "Join" button) when this browser is signed in as the verified account, else to signing in and back
   * there. Null when there is no open invitation for this address to go on to.
   */
  async function onToInvitation(
    req: Request,
    verified: { id: string; email: string },
  ): Promise<string | null> {
    const token = queryValue(req, 'invitation', 200);
    const view = await openInvitation(token);
    if (!view || view.invitation.email !== normaliseEmail(verified.email)) return null;
    const p = req.principal;
    if (p?.kind === 'session' && p.userId === verified.id) return acceptPathOf(token);
    return `/account/login?verified=1&return_to=${encodeURIComponent(acceptPathOf(token))}`;
  }

  router.get('/account/verify', perIp, async (req, res) => {
    const token = queryValue(req, 'token', 512);
    let notice: Notice;
    let status = 200;
    if (!token) {
      notice = { kind: 'error', text: 'This link is incomplete. Open the link from the e-mail again.' };
      status = 400;
    } else {
      try {
        const user = await verifyEmail(deps, token);
        const next = await onToInvitation(req, user);
        if (next) return res.redirect(303, next);
        notice = { kind: 'ok', text: 'Your e-mail address is verified. Thank you!' };
      } catch (caught) {
        const err = clientError(caught);
        const p = req.principal;
        if (p?.emailVerified && err.status !== 429) {
          // Signed in with an address already verified: a used link only means it worked before.
          const next =
            p.kind === 'session' ? await onToInvitation(req, { id: p.userId, email: p.email }) : null;
          if (next) return res.redirect(303, next);
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
        origin: auditOriginOf(req),
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
