import { Router, type Request } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { assertCredentialReaches, principalOf, type Auth } from '../auth/principal.js';
import { noAccess } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { parseOrgId } from '../ids.js';
import { liveRole } from '../orgs/membership.js';
import { getBalanceAlert, setBalanceAlert } from './balance-alerts.js';
import { auditOriginOf } from '../audit/context.js';

// The low-balance alert threshold of a client: owner only, like every billing setting
// (CONTRACT §8; anyone else 403 NO_ACCESS). Mounted by ./routes.ts.

export const balanceAlertBody = z.object({
  threshold_credits: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).nullable().meta({
    description: 'Alert when the balance falls below this many tokens, and at 0; 0: only at 0; null: off',
  }),
});

export function balanceAlertRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const signedIn = auth.require();

  async function ownedClient(req: Request): Promise<string> {
    const principal = principalOf(req);
    const orgKey = parseOrgId(String(req.params.client_id ?? ''));
    const role = orgKey ? await liveRole(deps.db, principal.userId, orgKey) : null;
    if (!orgKey || role !== 'owner') throw noAccess("only the client's owner may set its balance alert");
    assertCredentialReaches(principal, orgKey);
    return orgKey;
  }

  router.get('/v1/clients/:client_id/balance-alert', signedIn, async (req, res) => {
    res.json(await getBalanceAlert(deps.db, await ownedClient(req)));
  });

  router.put('/v1/clients/:client_id/balance-alert', signedIn, async (req, res) => {
    const orgKey = await ownedClient(req);
    const { threshold_credits } = parse(balanceAlertBody, req.body);
    res.json(await setBalanceAlert(deps.db, orgKey, threshold_credits, auditOriginOf(req)));
  });

  return router;
}
