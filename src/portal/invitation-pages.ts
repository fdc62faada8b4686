import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { auditOriginOf } from '../audit/context.js';
import { clientIdOf } from '../ids.js';
import {
  acceptInvitation,
  createInvitation,
  INVITATION_ACCEPT_PATH,
  invitationByToken,
  openInvitations,
  refusal,
  resendInvitation,
  revokeInvitation,
  type InvitationView,
} from '../orgs/invitations.js';
import { html, loginUrlFor, type SafeHtml } from '../page-kit/html.js';
import { requirePageSession } from '../auth/page-session.js';
import {
  alert,
  errorText,
  field,
  formValue,
  hidden,
  parseForm,
  postForm,
  queryValue,
  show,
  type Notice,
} from './components.js';
import { formAction, notFoundPage, orgOfPage } from './org-page-kit.js';

// Invitations in the portal: the owner invites an e-mail address (registered or not)
// from the members page and revokes open invitations; the invited person opens the mailed link, signs in
// or registers with that address, and accepts. The services are those of /v1/clients/{id}/invitations
// and /v1/invitations/accept (src/orgs/invitations.ts), so the page is never looser than the API.

const inviteForm = z.object({
  email: z.string().trim().max(254).pipe(z.email('Enter a valid e-mail address.')),
  role: z.enum(['member', 'viewer']).default('member'),
});
const invitationIdParam = z.string().regex(/^inv_[a-z0-9]{1,64}$/);
const ACCEPT_PATH = INVITATION_ACCEPT_PATH;
const day = (d: Date) => d.toISOString().slice(0, 10);

/** The owner's card on the members page: invite by e-mail, and the open invitations with Revoke. */
export async function invitationsCard(
  deps: Deps,
  req: Request,
  res: Response,
  orgKey: string,
  opts: { email?: string; error?: string } = {},
): Promise<SafeHtml> {
  const base = `/account/clients/${clientIdOf(orgKey)}/invitations`;
  const open = await openInvitations(deps.db, orgKey);
  const list =
    open.length === 0
      ? html`<p class="muted">No open invitations.</p>`
      : html`<ul class="rows">${open.map(
          (i) =>
            html`<li><span>${i.email} <span class="badge">${i.role}</span><span class="sub"> · expires ${day(i.expiresAt)}</span></span><span class="actions">${postForm(
              req,
              res,
              `${base}/${i.id}/resend`,
              html`<button type="submit" class="secondary" aria-label="Send the invitation of ${i.email} again">Send again</button>`,
              '',
            )}${postForm(
              req,
              res,
              `${base}/${i.id}/revoke`,
              html`<button type="submit" class="danger" aria-label="Revoke the invitation of ${i.email}">Revoke</button>`,
              '',
            )}</span></li>`,
        )}</ul>`;
  return html`<section class="card" aria-labelledby="h-invite"><h2 id="h-invite">Invite by e-mail</h2>
<p class="muted">For anyone, with or without an account: we mail them a link that works once and expires in 7 days. They join after signing in with that address (or creating an account with it). "Send again" mails a new link (at most 3 times per invitation).</p>${postForm(
    req,
    res,
    base,
    html`${field({ label: 'E-mail to invite', name: 'invite_email', type: 'email', value: opts.email ?? '', autocomplete: 'off', required: true, error: opts.error, autofocus: Boolean(opts.error) })}
<div class="field"><label for="f-invite-role">Role</label><select id="f-invite-role" name="role"><option value="member">member</option><option value="viewer">viewer</option></select></div>
<div class="actions"><button type="submit">Send invitation</button></div>`,
  )}<h3>Open invitations</h3>${list}</section>`;
}

export function invitationPageRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);

  /** A failed owner action: a short page with the reason and the way back to the members page. */
  const ownerError = (req: Request, res: Response, notice: Notice, status: number) => {
    show(req, res, {
      title: 'Not sent',
      status,
      narrow: true,
      body: html`<div class="card"><h1>Invitation not changed</h1>${alert(notice)}<p><a href="/account/clients/${String(req.params.clientId)}">Back to the members</a></p></div>`,
    });
    return Promise.resolve();
  };

  router.post(
    '/account/clients/:clientId/invitations',
    deps.limits.perIp,
    session,
    formAction(async (req, res) => {
      const found = await orgOfPage(deps, req, 'owner');
      if (!found) return notFoundPage(req, res);
      const parsed = parseForm(inviteForm, {
        email: formValue(req, 'invite_email', 254),
        role: formValue(req, 'role', 20) || undefined,
      });
      if (!parsed.ok)
        return ownerError(
          req,
          res,
          { kind: 'error', text: parsed.errors.email ?? 'Choose member or viewer.' },
          400,
        );
      const p = principalOf(req);
      await createInvitation(
        deps,
        found.org,
        { userId: p.userId, name: p.name },
        parsed.data.email,
        parsed.data.role,
        auditOriginOf(req),
      );
      res.redirect(303, `/account/clients/${clientIdOf(found.org.id)}?notice=invited`);
    }, ownerError),
  );

  router.post(
    '/account/clients/:clientId/invitations/:invitationId/revoke',
    session,
    formAction(async (req, res) => {
      const found = await orgOfPage(deps, req, 'owner');
      const id = invitationIdParam.safeParse(req.params.invitationId);
      if (!found || !id.success) return notFoundPage(req, res);
      await revokeInvitation(deps.db, found.org.id, id.data, auditOriginOf(req));
      res.redirect(303, `/account/clients/${clientIdOf(found.org.id)}?notice=invitation_revoked`);
    }, ownerError),
  );

  router.post(
    '/account/clients/:clientId/invitations/:invitationId/resend',
    session,
    formAction(async (req, res) => {
      const found = await orgOfPage(deps, req, 'owner');
      const id = invitationIdParam.safeParse(req.params.invitationId);
      if (!found || !id.success) return notFoundPage(req, res);
      const p = principalOf(req);
      await resendInvitation(
        deps,
        found.org,
        { userId: p.userId, name: p.name },
        id.data,
        auditOriginOf(req),
      );
      res.redirect(303, `/account/clients/${clientIdOf(found.org.id)}?notice=invitation_resent`);
    }, ownerError),
  );

  /** The invitation a link opens, and what the visitor can do about it. */
  async function acceptPage(req: Request, res: Response, token: string, notice?: Notice, status = 200) {
    const view = await invitationByToken(deps, token);
    if (!view)
      return invitationGone(req, res, 'This invitation link is not valid. Ask the owner for a new one.', 404);
    if (view.status !== 'pending') {
      const err = refusal(view.status);
      return invitationGone(req, res, errorText(err), err.status);
    }
    show(req, res, {
      title: `Join ${view.orgName}`,
      status,
      narrow: true,
      body: html`<div class="card"><h1>Join ${view.orgName}</h1>${alert(notice)}
<p><strong>${view.inviterName}</strong> invited <strong>${view.invitation.email}</strong> to join <strong>${view.orgName}</strong> as ${view.invitation.role}.</p>
${whatNext(req, res, view, token)}</div>`,
    });
  }

  function invitationGone(req: Request, res: Response, text: string, status: number) {
    show(req, res, {
      title: 'Invitation',
      status,
      narrow: true,
      body: html`<div class="card"><h1>Invitation</h1><div class="alert error" role="alert">${text}</div><p><a href="/account">Go to your account</a></p></div>`,
    });
  }

  function whatNext(req: Request, res: Response, view: InvitationView, token: string): SafeHtml {
    const p = req.principal;
    const here = `${ACCEPT_PATH}?token=${encodeURIComponent(token)}`;
    if (!p || p.kind !== 'session')
      return html`<p>Sign in with that address to accept.</p><div class="actions"><a class="button" href="${loginUrlFor(here)}">Sign in to accept</a></div>
<p class="muted">No account yet? <a href="/account/register?invitation=${encodeURIComponent(token)}">Create one with ${view.invitation.email}</a>: once you verify the address from the mail we send you, you come back here to join.</p>`;
    if (p.email !== view.invitation.email)
      return html`<p class="alert info">You are signed in as ${p.email}. This invitation is for ${view.invitation.email}: sign out, then sign in with that address.</p>
${postForm(req, res, '/account/logout', html`<button type="submit" class="secondary">Sign out</button>`)}`;
    if (!p.emailVerified)
      return html`<p class="alert info">Verify your e-mail address first: open the link we mailed you, which brings you back here to join.</p>`;
    return postForm(
      req,
      res,
      ACCEPT_PATH,
      html`${hidden('token', token)}<div class="actions"><button type="submit">Join ${view.orgName}</button><a href="/account">Not now</a></div>`,
    );
  }

  // The link of the mail. It works signed out (it says what the invitation is and how to accept it);
  // a guessed token is one request of the per-address limit, and accepting counts per person.
  router.get(ACCEPT_PATH, deps.limits.perIp, async (req, res) => {
    await acceptPage(req, res, queryValue(req, 'token', 200));
  });

  router.post(
    ACCEPT_PATH,
    deps.limits.perIp,
    session,
    formAction(
      async (req, res) => {
        const p = principalOf(req);
        const joined = await acceptInvitation(
          deps,
          { userId: p.userId, email: p.email },
          formValue(req, 'token', 200),
          auditOriginOf(req),
        );
        res.redirect(303, `/account/clients/${clientIdOf(joined.orgKey)}?notice=joined`);
      },
      (req, res, notice, status) => acceptPage(req, res, formValue(req, 'token', 200), notice, status),
    ),
  );

  return router;
}
