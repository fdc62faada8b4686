import { Router, type Request } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { auditOriginOf } from '../audit/context.js';
import { requireLiveCredential } from '../orgs/membership.js';
import { callerRole } from '../orgs/caller.js';
import { databaseOutageAs503 } from '../db/outage.js';
import { getOrgLimits, getTokenLimits, limitsBody, setOrgLimits, setTokenLimits } from './limit-settings.js';

// RPM and TPM limits (CONTRACT §11): the owner sets them (S or the owner's B); the owner and members read
// them, viewers do not. A change applies here at once and in every other process within LIMITS_REFRESH_MS.

const tokenIdParam = z.coerce.number().int().positive().max(2_147_483_647);

function tokenIdOf(req: Request): number {
  const parsed = tokenIdParam.safeParse(req.params.token_id);
  if (!parsed.success) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such active token of this client');
  return parsed.data;
}

export function limitRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const signedIn = [auth.require(), requireLiveCredential];
  const base = '/v1/clients/:client_id';

  router.get(`${base}/limits`, ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'member');
    res.json(await getOrgLimits(deps.db, org.id));
  });

  router.put(`${base}/limits`, ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const body = parse(limitsBody, req.body ?? {});
    const out = await setOrgLimits(deps.db, org.id, body, auditOriginOf(req));
    await deps.limits.modelRates.refresh();
    res.json(out);
  });

  router.get(`${base}/tokens/:token_id/limits`, ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'member');
    res.json(await getTokenLimits(deps.db, org.id, tokenIdOf(req)));
  });

  router.put(`${base}/tokens/:token_id/limits`, ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const body = parse(limitsBody, req.body ?? {});
    const out = await setTokenLimits(deps.db, org.id, tokenIdOf(req), body, auditOriginOf(req));
    await deps.limits.modelRates.refresh();
    res.json(out);
  });

  router.use('/v1', databaseOutageAs503(deps.db));
  return router;
}
