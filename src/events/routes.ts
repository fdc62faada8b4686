import { Router, type Request } from 'express';
import type { Deps } from '../deps.js';
import { assertCredentialReaches, principalOf, type Auth } from '../auth/principal.js';
import { noAccess } from '../http/errors.js';
import { pageOf } from '../http/pagination.js';
import { parse } from '../http/validate.js';
import { auditOriginOf } from '../audit/context.js';
import { parseOrgId } from '../ids.js';
import { liveRole } from '../orgs/membership.js';
import { databaseOutageAs503 } from '../db/outage.js';
import { createEndpoint, deleteEndpoint, listDeliveries, listEndpoints } from './endpoints.js';
import { deliveriesQuery, endpointBody, endpointParams } from './schema.js';

// An organization's webhook endpoints: owner only, as every billing setting (CONTRACT
// §8: only the owner manages billing; anyone else 403 NO_ACCESS). An endpoint id of another organization
// is 404, like one that does not exist.

export function eventRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const { db } = deps;
  const signedIn = auth.require();

  async function ownedClient(req: Request): Promise<string> {
    const principal = principalOf(req);
    const orgKey = parseOrgId(String(req.params.client_id ?? ''));
    const role = orgKey ? await liveRole(db, principal.userId, orgKey) : null;
    if (!orgKey || role !== 'owner')
      throw noAccess("only the client's owner may manage its webhook endpoints");
    assertCredentialReaches(principal, orgKey);
    return orgKey;
  }

  const base = '/v1/clients/:client_id/webhook-endpoints';

  router.get(base, signedIn, async (req, res) => {
    res.json(await listEndpoints(db, await ownedClient(req)));
  });

  router.post(base, signedIn, async (req, res) => {
    const orgKey = await ownedClient(req);
    const body = parse(endpointBody, req.body);
    res.json(
      await createEndpoint(db, deps.keys.encryption, deps.config.devMode, orgKey, body, auditOriginOf(req)),
    );
  });

  router.delete(`${base}/:endpoint_id`, signedIn, async (req, res) => {
    const orgKey = await ownedClient(req);
    const { endpoint_id } = parse(endpointParams, req.params);
    res.json(await deleteEndpoint(db, orgKey, endpoint_id, auditOriginOf(req)));
  });

  router.get(`${base}/:endpoint_id/deliveries`, signedIn, async (req, res) => {
    const orgKey = await ownedClient(req);
    const { endpoint_id } = parse(endpointParams, req.params);
    const page = pageOf(parse(deliveriesQuery, req.query));
    res.json(await listDeliveries(db, orgKey, endpoint_id, page));
  });

  // A database outage is 503 DATABASE_UNAVAILABLE on these routes, never 500 (src/db/outage.ts).
  router.use('/v1', databaseOutageAs503(deps.db));
  return router;
}
