import { Router } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { COMMON_ERRORS, errorOf } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { callerRole } from '../orgs/caller.js';
import { clientIdOf } from '../ids.js';
import { disableAutoTopup, getAutoTopup, setAutoTopup } from './auto-topup-settings.js';
import { auditOriginOf } from '../audit/context.js';

// Auto top-up settings over HTTP: the owner opts in, changes or opts out; members
// (not viewers) read them, as they read the rest of their client's billing (CONTRACT §8).

/** Amounts in integer cents, as a top-up's amount_usd (CONTRACT §8: 100 to 1,000,000). */
export const autoTopupBody = z.object({
  trigger_credits: z.number().int().min(0).max(1_000_000_000_000),
  amount_usd: z.number().int().min(100).max(1_000_000),
  monthly_cap_usd: z.number().int().min(100).max(100_000_000),
});

export function autoTopupRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const signedIn = auth.require();

  router.get('/v1/clients/:client_id/auto-topup', signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'member');
    res.json((await getAutoTopup(deps.db, org.id)) ?? { client_id: clientIdOf(org.id), enabled: false });
  });

  router.put('/v1/clients/:client_id/auto-topup', signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const body = parse(autoTopupBody, req.body ?? {});
    if (body.monthly_cap_usd < body.amount_usd)
      throw errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', 'monthly_cap_usd must be at least amount_usd', {
        errors: [{ path: 'monthly_cap_usd', message: 'must be at least amount_usd' }],
      });
    res.json(await setAutoTopup(deps.db, org.id, body, auditOriginOf(req)));
  });

  router.delete('/v1/clients/:client_id/auto-topup', signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    await disableAutoTopup(deps.db, org.id, null, auditOriginOf(req));
    res.json({ client_id: clientIdOf(org.id), enabled: false });
  });

  return router;
}
