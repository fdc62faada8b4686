import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { clientIdOf, parseOrgId } from '../ids.js';
import { addMemberByEmail, createClient, listMembers, removeMember, requireOrgRole } from './services.js';
import { html, requirePageSession, verifyCsrfField } from './html.js';
import {
  alert,
  applyErrorHeaders,
  clientError,
  errorText,
  field,
  formValue,
  type Notice,
  parseForm,
  postForm,
  queryValue,
  show,
} from './components.js';
import { renderDashboard } from './dashboard.js';
import { AppError } from '../http/errors.js';

// Organizations on the dashboard: create one (the service of POST /v1/clients), see the members of one
// you belong to (any live member), and — owners only — add a registered account by e-mail or remove a
// member (the services of POST/DELETE /v1/clients/{id}/members, so removal revokes that member's
// credentials in the same transaction). Another organization's page answers like one that does not
// exist (STYLE: tenants).

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

  /** The org of the URL with the caller's role, or a 404 page when it is not one of theirs. */
  async function orgOf(req: Request) {
    const orgKey = parseOrgId(String(req.params.clientId));
    if (!orgKey) return null;
    try {
      return await requireOrgRole(deps.db, principalOf(req).userId, orgKey, 'viewer');
    } catch (err) {
      if (err instanceof AppError && (err.status === 403 || err.status === 404)) return null;
      throw err;
    }
  }

  function notFoundPage(req: Request, res: Response) {
    show(req, res, {
      title: 'Not found',
      status: 404,
      narrow: true,
      body: html`<div class="card"><h1>Not found</h1><p>There is no such organization among yours.</p><p><a href="/account">Back to your account</a></p></div>`,
    });
  }

  async function membersPage(
    req: Request,
    res: Response,
    opts: { notice?: Notice | null; status?: number; email?: string; emailError?: string } = {},
  ) {
    const found = await orgOf(req);
    if (!found) return notFoundPage(req, res);
    const { org, role } = found;
    const clientId = clientIdOf(org.id);
    const owner = role === 'owner';
    const members = await listMembers(deps, org.id);
    const rows = members.map(
      (m) =>
        html`<tr><td>${m.name}</td><td>${m.email}</td><td>${m.role}</td>${
          owner
            ? html`<td>${
                m.role === 'owner'
                  ? ''
                  : postForm(
                      req,
                      res,
                      `/account/clients/${clientId}/members/${m.userId}/remove`,
                      html`<button type="submit" class="danger" aria-label="Remove ${m.email}">Remove</button>`,
                      '',
                    )
              }</td>`
            : ''
        }</tr>`,
    );
    const addForm = owner
      ? html`<h3>Add a member</h3><p class="muted">They need a registered, verified account.</p>${postForm(
          req,
          res,
          `/account/clients/${clientId}/members`,
          html`${field({ label: 'E-mail', name: 'email', type: 'email', value: opts.email ?? '', autocomplete: 'off', required: true, error: opts.emailError })}
<div class="field"><label for="f-role">Role</label><select id="f-role" name="role"><option value="member">member — uses the organization's tokens and projects</option><option value="viewer">viewer — reads only</option></select></div>
<div class="actions"><button type="submit" class="secondary">Add member</button></div>`,
        )}`
      : '';
    show(req, res, {
      title: org.name,
      status: opts.status ?? 200,
      body: html`<p><a href="/account">← Your account</a></p><h1>${org.name}</h1>${alert(opts.notice ?? NOTICES[queryValue(req, 'notice')] ?? null)}
<section class="card" aria-labelledby="h-members"><h2 id="h-members">Members</h2>
<p class="muted">Id <code>${clientId}</code> · your role: ${role}</p>
<table><thead><tr><th scope="col">Name</th><th scope="col">E-mail</th><th scope="col">Role</th>${owner ? html`<th scope="col"><span class="skip">Actions</span></th>` : ''}</tr></thead>
<tbody>${rows}</tbody></table>${addForm}</section>`,
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
          emailError: parsed.errors.email ?? parsed.errors.role,
        });
      await addMemberByEmail(deps, org.id, parsed.data.email, parsed.data.role);
      res.redirect(303, `/account/clients/${clientIdOf(org.id)}?notice=added`);
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      const inline = err.code === 'USER_NOT_FOUND' || err.code === 'ALREADY_MEMBER';
      await membersPage(req, res, {
        status: err.status,
        email,
        ...(inline ? { emailError: errorText(err) } : { notice: { kind: 'error', text: errorText(err) } }),
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
      if (!userId.success) throw new AppError(404, 'NOT_FOUND', 'no such member');
      await removeMember(deps, org, userId.data);
      res.redirect(303, `/account/clients/${clientIdOf(org.id)}?notice=removed`);
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      await membersPage(req, res, { status: err.status, notice: { kind: 'error', text: errorText(err) } });
    }
  });

  return router;
}
