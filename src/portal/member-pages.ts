import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { auditOriginOf } from '../audit/context.js';
import { clientIdOf } from '../ids.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { changeMemberRole } from '../orgs/self-service.js';
import { listMembers, type MemberRecord } from '../orgs/service.js';
import { csrfField, html, type SafeHtml } from '../page-kit/html.js';
import { requirePageSession } from '../auth/page-session.js';
import { alert, postForm, show, type Notice } from './components.js';
import { confirmPage, formAction, notFoundPage, orgOfPage } from './org-page-kit.js';

// A member's row on the members page: the owner changes the role (member ⇄ viewer;
// the service of PATCH /v1/clients/{id}/members/{user_id}) and removes someone only after a page that
// says what removal does (the remove form itself stays in ./clients-page.ts, the service of DELETE …).

const userIdParam = z.string().regex(/^usr_[a-z0-9]{1,64}$/);
const roleBody = z.object({ role: z.enum(['member', 'viewer']) });

/** The role select of one member's row, a form of its own with its CSRF field. */
export function roleForm(req: Request, res: Response, action: string, m: MemberRecord): SafeHtml {
  const id = `role-${m.userId}`;
  const option = (r: 'member' | 'viewer') =>
    html`<option value="${r}"${m.role === r ? html` selected` : ''}>${r}</option>`;
  return html`<form method="post" action="${action}" class="inline">${csrfField(req, res)}<label for="${id}" class="sr">Role of ${m.email}</label><select id="${id}" name="role">${option('member')}${option('viewer')}</select><button type="submit" class="secondary" aria-label="Save the role of ${m.email}">Save</button></form>`;
}

/** The owner's view of one member of the URL's org, or null (not owner, not a member, bad id). */
async function memberOf(deps: Deps, req: Request) {
  const found = await orgOfPage(deps, req, 'owner');
  const userId = userIdParam.safeParse(req.params.userId);
  if (!found || !userId.success) return null;
  const member = (await listMembers(deps.db, found.org.id)).find((m) => m.userId === userId.data);
  return member ? { ...found, member } : null;
}

export function memberPageRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);

  const errorPage = async (req: Request, res: Response, notice: Notice, status: number) => {
    const back = `/account/clients/${String(req.params.clientId)}`;
    show(req, res, {
      title: 'Not changed',
      status,
      narrow: true,
      body: html`<div class="card"><h1>Not changed</h1>${alert(notice)}<p><a href="${back}">Back to the members</a></p></div>`,
    });
    return Promise.resolve();
  };

  router.post(
    '/account/clients/:clientId/members/:userId/role',
    session,
    formAction(async (req, res) => {
      const found = await memberOf(deps, req);
      if (!found) return notFoundPage(req, res);
      const parsed = roleBody.safeParse(req.body);
      if (!parsed.success) throw errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', 'choose member or viewer');
      await changeMemberRole(deps, found.org, found.member.userId, parsed.data.role, auditOriginOf(req));
      res.redirect(303, `/account/clients/${clientIdOf(found.org.id)}?notice=role`);
    }, errorPage),
  );

  // Confirm before removing someone: the Remove link of the members table leads here, and only the
  // button on this page posts the removal.
  router.get('/account/clients/:clientId/members/:userId/remove', session, async (req, res) => {
    const found = await memberOf(deps, req);
    if (!found || found.member.role === 'owner') return notFoundPage(req, res);
    const { org, member } = found;
    const base = `/account/clients/${clientIdOf(org.id)}`;
    confirmPage(req, res, {
      title: `Remove ${member.name}?`,
      what: html`<p><strong>${member.name}</strong> (${member.email}) will no longer be a member of <strong>${org.name}</strong>.</p>
<p>Their API tokens and app connections for this organization stop working at once. Their projects stay with the organization.</p>`,
      form: postForm(
        req,
        res,
        `${base}/members/${member.userId}/remove`,
        html`<div class="actions"><button type="submit" class="danger">Remove ${member.name}</button></div>`,
      ),
      back: base,
    });
  });

  return router;
}
