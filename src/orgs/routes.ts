import { Router } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { principalOf, type Auth } from '../auth/principal.js';
import { parse } from '../http/validate.js';
import { auditOriginOf } from '../audit/context.js';
import { pageOf, pageQuery } from '../http/pagination.js';
import { clientIdOf, unix } from '../ids.js';
import { requireLiveCredential } from './membership.js';
import { addMemberByEmail, createClient, deleteClient, listMembers, removeMember } from './service.js';
import { databaseOutageAs503 } from '../db/outage.js';
import { callerRole, memberJson, orgKeyParam } from './caller.js';
import { clientListRead } from './client-list.js';
import { expressRead } from '../http/read-row.js';
import { orgPeopleRoutes } from './people-routes.js';

// Clients and members (interface document: Clients, Team membership; CONTRACT §5). Every route takes a
// session or an svc_ token ("S|B"); a token's own membership is revalidated first (Authentication 5).

export const createBody = z.object({ name: z.string().trim().min(1).max(100) });
export const addMemberBody = z.object({
  email: z.string().trim().min(3).max(320),
  role: z.enum(['member', 'viewer']).default('member'),
});
const userIdParam = z.string().min(1).max(100);

export function orgRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const signedIn = [auth.require(), requireLiveCredential];

  // The list, as the route table serves it too (src/orgs/client-list.ts).
  const list = clientListRead(deps, auth);
  router.get(list.path, ...expressRead(list));

  router.post('/v1/clients', ...signedIn, async (req, res) => {
    const { name } = parse(createBody, req.body ?? {});
    // owner_id comes from the credential, never from the body (interface document: Client).
    const org = await createClient(deps.db, principalOf(req).userId, name);
    res.json({
      id: clientIdOf(org.id),
      name: org.name,
      owner_id: org.ownerId,
      created_at: unix(org.createdAt),
    });
  });

  router.delete('/v1/clients/:client_id', ...signedIn, async (req, res) => {
    await callerRole(deps, req, 'owner');
    const org = await deleteClient(deps, principalOf(req).userId, orgKeyParam(req), auditOriginOf(req));
    res.json({ id: clientIdOf(org.id), deleted: true });
  });

  router.get('/v1/clients/:client_id/members', ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'viewer');
    const page = pageOf(parse(pageQuery, req.query));
    res.json({ data: (await listMembers(deps.db, org.id, page)).map(memberJson) });
  });

  router.post('/v1/clients/:client_id/members', ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const body = parse(addMemberBody, req.body ?? {});
    res.json(memberJson(await addMemberByEmail(deps, org, body.email, body.role, auditOriginOf(req))));
  });

  router.delete('/v1/clients/:client_id/members/:user_id', ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const userId = parse(userIdParam, req.params.user_id);
    await removeMember(deps, org, userId, { origin: auditOriginOf(req) });
    res.json({ removed: true });
  });

  router.use(orgPeopleRoutes(deps, auth));

  // A database outage is 503 DATABASE_UNAVAILABLE on these routes, never 500 (src/db/outage.ts).
  router.use('/v1', databaseOutageAs503(deps.db));
  return router;
}
