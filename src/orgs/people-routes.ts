import { Router } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { principalOf, type Auth } from '../auth/principal.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { auditOriginOf } from '../audit/context.js';
import { pageOf, pageQuery } from '../http/pagination.js';
import { clientIdOf, unix } from '../ids.js';
import { requireLiveCredential } from './membership.js';
import { callerRole, memberJson } from './caller.js';
import { changeMemberRole, leaveClient, renameClient } from './self-service.js';
import {
  acceptInvitation,
  createInvitation,
  invitationStatus,
  listInvitations,
  resendInvitation,
  revokeInvitation,
  type InvitationRow,
} from './invitations.js';

// An organization's people (docs/orgs-tokens-device.md): rename the client, change a
// member's role, leave, and invitations by e-mail. The interface document shows none of these; the
// shapes follow its member routes (CONTRACT §5) and Stripe's habits (PATCH for a partial update, a
// resource of its own for invitations).

export const renameBody = z.object({ name: z.string().trim().min(1).max(100) });
export const roleBody = z.object({ role: z.enum(['member', 'viewer']) });
export const inviteBody = z.object({
  email: z.string().trim().max(320).pipe(z.email()),
  role: z.enum(['member', 'viewer']).default('member'),
});
export const acceptBody = z.object({ token: z.string().min(1).max(200) });
const userIdParam = z.string().min(1).max(100);
const invitationIdParam = z.string().regex(/^inv_[a-z0-9]{1,64}$/);

export const invitationJson = (i: InvitationRow) => ({
  id: i.id,
  client_id: clientIdOf(i.orgId),
  email: i.email,
  role: i.role,
  status: invitationStatus(i),
  created_at: unix(i.createdAt),
  expires_at: unix(i.expiresAt),
  accepted_at: unix(i.acceptedAt),
  revoked_at: unix(i.revokedAt),
});

export function orgPeopleRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const signedIn = [auth.require(), requireLiveCredential];

  router.patch('/v1/clients/:client_id', ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const { name } = parse(renameBody, req.body ?? {});
    const renamed = await renameClient(deps.db, org.id, name, auditOriginOf(req));
    res.json({
      id: clientIdOf(renamed.id),
      name: renamed.name,
      owner_id: renamed.ownerId,
      created_at: unix(renamed.createdAt),
    });
  });

  router.patch('/v1/clients/:client_id/members/:user_id', ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const userId = parse(userIdParam, req.params.user_id);
    const { role } = parse(roleBody, req.body ?? {});
    res.json(memberJson(await changeMemberRole(deps, org, userId, role, auditOriginOf(req))));
  });

  router.post('/v1/clients/:client_id/leave', ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'viewer');
    await leaveClient(deps, org, principalOf(req).userId, auditOriginOf(req));
    res.json({ left: true });
  });

  router.get('/v1/clients/:client_id/invitations', ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const page = pageOf(parse(pageQuery, req.query));
    res.json({ data: (await listInvitations(deps.db, org.id, page)).map(invitationJson) });
  });

  router.post('/v1/clients/:client_id/invitations', ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const body = parse(inviteBody, req.body ?? {});
    const p = principalOf(req);
    const row = await createInvitation(
      deps,
      org,
      { userId: p.userId, name: p.name },
      body.email,
      body.role,
      auditOriginOf(req),
    );
    res.json(invitationJson(row));
  });

  router.delete('/v1/clients/:client_id/invitations/:invitation_id', ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const id = invitationIdParam.safeParse(req.params.invitation_id);
    if (!id.success) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such invitation');
    res.json(invitationJson(await revokeInvitation(deps.db, org.id, id.data, auditOriginOf(req))));
  });

  router.post('/v1/clients/:client_id/invitations/:invitation_id/resend', ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const id = invitationIdParam.safeParse(req.params.invitation_id);
    if (!id.success) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such invitation');
    const p = principalOf(req);
    res.json(
      invitationJson(
        await resendInvitation(deps, org, { userId: p.userId, name: p.name }, id.data, auditOriginOf(req)),
      ),
    );
  });

  // Accepting changes the person's own memberships: a session only, like minting a token (an svc_ token
  // acts for one organization, never for the account; it gets 401 here). The token is a guessable secret: per address and per person.
  router.post(
    '/v1/invitations/accept',
    deps.limits.perIp,
    auth.require({ allow: ['session'] }),
    async (req, res) => {
      const p = principalOf(req);
      const { token } = parse(acceptBody, req.body ?? {});
      const joined = await acceptInvitation(
        deps,
        { userId: p.userId, email: p.email },
        token,
        auditOriginOf(req),
      );
      res.json({ client: { id: clientIdOf(joined.orgKey), name: joined.orgName, role: joined.role } });
    },
  );

  return router;
}
