import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { auditOriginOf } from '../audit/context.js';
import { clientIdOf } from '../ids.js';
import { addMemberByEmail, createClient, listMembers, removeMember, requireOrgRole } from './services.js';
import { html, verifyCsrfField } from '../page-kit/html.js';
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
import { renderDashboard } from './dashboard.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { notFoundPage, orgOfPage } from './org-page-kit.js';
import { roleForm } from './member-pages.js';
import { invitationsCard } from './invitation-pages.js';
import { serviceAccountsCard } from './service-accounts-card.js';

// Organizations on the dashboard: create one (the service of POST /v1/clients), see the members of one
// you belong to (any live member), and — owners only — add a registered account by e-mail, change a
// role (./member-pages.ts), invite by e-mail (./invitation-pages.ts) or remove a member after a
// confirmation page (the services of POST/DELETE /v1/clients/{id}/members, so removal revokes that
// member's credentials in the same transaction). Renaming, deleting and leaving are on the settings page
// (./org-settings-page.ts). Another organization's page answers like one that does not exist (STYLE).

const createBody = z.object({
  name: z.string().trim().min(1, 'Enter a name.').max(200, 'At most 200 characters.'),
});
const addBody = z.object({
  email: z.string().trim().max(254).pipe(z.email('Enter a valid e-mail address.')),
  role: z.enum(['member', 'viewer']).default('member'),
});
const userIdParam = z.string().regex(/^usr_[a-z0-9]{1,64}$/);

const NOTICES: Record<string, Notice> = {
  added: { kind: 'ok', text: 'Member added.' },
  removed: { kind: 'ok', text: 'Member removed. Their credentials for this organization were revoked.' },
  role: { kind: 'ok', text: 'Role changed.' },
  invited: { kind: 'ok', text: 'Invitation sent. The link works once and expires in 7 days.' },
  invitation_revoked: { kind: 'ok', text: 'Invitation revoked. Its link no longer works.' },
  invitation_resent: {
    kind: 'ok',
    text: 'Invitation sent again with a new link (the one sent before no longer works); it expires in 7 days.',
  },
  joined: { kind: 'ok', text: 'You joined this organization.' },
};

export function clientPageRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);

  router.post('/account/clients', session, async (req, res) => {
    try {
      verifyCsrfField(req);
      const parsed = parseForm(createBody, req.body);
      if (!parsed.ok)
        return renderDashboard(deps, req, res, { status: 400, clientError: parsed.errors.name! });
      await createClient(deps, { userId: principalOf(req).userId, name: parsed.data.name });
      res.redirect(303, '/account?notice=client_created');
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      await renderDashboard(deps, req, res, { status: err.status, clientError: errorText(err) });
    }
  });

  const orgOf = (req: Request) => orgOfPage(deps, req);

  async function membersPage(
    req: Request,
    res: Response,
    opts: {
      notice?: Notice | null;
      status?: number;
      email?: string;
      role?: string;
      emailError?: string;
      /** The address is not a verified account's: offer to invite it, with the same role. */
      inviteInstead?: { email: string; role: 'member' | 'viewer' };
    } = {},
  ) {
    const found = await orgOf(req);
    if (!found) return notFoundPage(req, res);
    const { org, role } = found;
    const clientId = clientIdOf(org.id);
    const owner = role === 'owner';
    const members = await listMembers(deps, org.id);
    const base = `/account/clients/${clientId}`;
    // A stacked table (class "stack"): at phone width each row becomes a block with its labels, so the
    // role form never pushes the page sideways (no sideways scroll at 390 px).
    const rows = members.map(
      (m) =>
        html`<tr><td data-label="Member">${m.name}<div class="sub">${m.email}</div></td><td data-label="Role">${
          owner && m.role !== 'owner' ? roleForm(req, res, `${base}/members/${m.userId}/role`, m) : m.role
        }</td>${
          owner
            ? html`<td>${
                m.role === 'owner'
                  ? ''
                  : html`<a href="${base}/members/${m.userId}/remove" aria-label="Remove ${m.email}…">Remove…</a>`
              }</td>`
            : ''
        }</tr>`,
    );
    const addForm = owner
      ? html`<h3>Add a member</h3><p class="muted">For someone who already has a verified svc account. Anyone else: invite them by e-mail below.</p>${postForm(
          req,
          res,
          `/account/clients/${clientId}/members`,
          html`${field({ label: 'E-mail', name: 'email', type: 'email', value: opts.email ?? '', autocomplete: 'off', required: true, error: opts.emailError, autofocus: Boolean(opts.emailError) })}
<div class="field"><label for="f-role">Role</label><select id="f-role" name="role"><option value="member">member — uses the organization's tokens and projects</option><option value="viewer"${opts.role === 'viewer' ? html` selected` : ''}>viewer — reads only</option></select></div>
<div class="actions"><button type="submit" class="secondary">Add member</button></div>`,
        )}${
          opts.inviteInstead
            ? postForm(
                req,
                res,
                `/account/clients/${clientId}/invitations`,
                html`${hidden('invite_email', opts.inviteInstead.email)}${hidden('role', opts.inviteInstead.role)}<p>Not an svc account yet? Invite ${opts.inviteInstead.email} as ${opts.inviteInstead.role}: we mail them a link to create one and join.</p>
<div class="actions"><button type="submit">Invite instead</button></div>`,
                'stack invite-instead',
              )
            : ''
        }`
      : '';
    show(req, res, {
      title: org.name,
      status: opts.status ?? 200,
      body: html`<p><a href="/account">← Your account</a></p><h1>${org.name}</h1>${alert(opts.notice ?? NOTICES[queryValue(req, 'notice')] ?? null)}
<section class="card" aria-labelledby="h-members"><h2 id="h-members">Members</h2>
<p class="muted">Id <code>${clientId}</code> · your role: ${role} · <a href="${base}/settings">Organization settings</a></p>
<table class="stack" aria-labelledby="h-members"><thead><tr><th scope="col">Member</th><th scope="col">Role</th>${owner ? html`<th scope="col"><span class="sr">Actions</span></th>` : ''}</tr></thead>
<tbody>${rows}</tbody></table>${addForm}</section>${owner ? await serviceAccountsCard(deps, org.id) : ''}${owner ? await invitationsCard(deps, req, res, org.id) : ''}`,
    });
  }

  router.get('/account/clients/:clientId', session, (req, res) => membersPage(req, res));

  router.post('/account/clients/:clientId/members', session, async (req, res) => {
    const email = formValue(req, 'email', 254);
    try {
      verifyCsrfField(req);
      const found = await orgOf(req);
      if (!found) return notFoundPage(req, res);
      const { org } = await requireOrgRole(deps.db, principalOf(req).userId, found.org.id, 'owner');
      const parsed = parseForm(addBody, req.body);
      if (!parsed.ok)
        return membersPage(req, res, {
          status: 400,
          email,
          role: formValue(req, 'role', 20),
          emailError: parsed.errors.email ?? parsed.errors.role,
        });
      await addMemberByEmail(deps, org, parsed.data.email, parsed.data.role, auditOriginOf(req));
      res.redirect(303, `/account/clients/${clientIdOf(org.id)}?notice=added`);
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      const inline = err.code === 'USER_NOT_FOUND' || err.code === 'ALREADY_MEMBER';
      const role = formValue(req, 'role', 20) === 'viewer' ? 'viewer' : 'member';
      await membersPage(req, res, {
        status: err.status,
        email,
        role,
        ...(inline ? { emailError: errorText(err) } : { notice: { kind: 'error', text: errorText(err) } }),
        ...(err.code === 'USER_NOT_FOUND' ? { inviteInstead: { email: email.trim(), role } } : {}),
      });
    }
  });

  router.post('/account/clients/:clientId/members/:userId/remove', session, async (req, res) => {
    try {
      verifyCsrfField(req);
      const found = await orgOf(req);
      if (!found) return notFoundPage(req, res);
      const { org } = await requireOrgRole(deps.db, principalOf(req).userId, found.org.id, 'owner');
      const userId = userIdParam.safeParse(req.params.userId);
      if (!userId.success) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such member');
      await removeMember(deps, org, userId.data, auditOriginOf(req));
      res.redirect(303, `/account/clients/${clientIdOf(org.id)}?notice=removed`);
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      await membersPage(req, res, { status: err.status, notice: { kind: 'error', text: errorText(err) } });
    }
  });

  return router;
}
