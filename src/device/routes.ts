import { Router } from 'express';
import { z } from 'zod';
import { eq } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { users } from '../db/schema.js';
import { parse } from '../http/validate.js';
import { auditOriginOf } from '../audit/context.js';
import { orgIdOf } from '../ids.js';
import { liveRole } from '../orgs/membership.js';
import { mintApiToken } from '../tokens/service.js';
import {
  approveUserCode,
  createDeviceAuthorization,
  denyUserCode,
  deviceCodesUnavailable,
  pollDeviceCode,
} from './store.js';
import { orgKeyField } from '../orgs/schema.js';
import { AppError } from '../http/errors.js';
import { databaseOutageAs503 } from '../db/outage.js';

// The terminal device flow (interface document: Device flow; CONTRACT §6). The terminal asks for a code,
// the person approves it at {V2_URL}/account/device (or through /authorize), the terminal polls and
// receives an svc_ credential exactly once.

export const DEVICE_TOKEN_NAME = 'Device login';

export const authorizeBody = z.object({
  user_code: z.string().min(1).max(64),
  client_id: orgKeyField.optional(),
});
export const denyBody = z.object({ user_code: z.string().min(1).max(64) });
export const pollBody = z.object({ device_code: z.string().min(1).max(256) });

/**
 * Issuing and polling are nothing but device-code reads and writes (and, on hand-out, the token mint in
 * the same transaction): any failure there is the store failing, answered like the user-code lookup
 * (store.ts) with 503 DEVICE_CODES_UNAVAILABLE and Retry-After, never 500. A poll that fails rolled
 * its transaction back, so the approval stays unconsumed and the next poll gets the credential.
 */
async function failClosed<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    throw err instanceof AppError ? err : deviceCodesUnavailable();
  }
}

export function deviceRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = auth.require({ allow: ['session'] });
  // RATE_LIMIT_IP_PER_MIN per address on the device routes (CONTRACT §1).
  router.use('/v1/auth/device', deps.limits.perIp);

  router.post('/v1/auth/device/code', async (_req, res) => {
    const issued = await failClosed(() => createDeviceAuthorization(deps, { flow: 'terminal' }));
    const verificationUri = `${deps.config.v2Url}/account/device`;
    res.json({
      device_code: issued.deviceCode,
      user_code: issued.userCode,
      verification_uri: verificationUri,
      verification_uri_complete: `${verificationUri}?user_code=${encodeURIComponent(issued.userCode)}`,
      expires_in: issued.expiresIn,
      interval: issued.interval,
    });
  });

  router.post('/v1/auth/device/authorize', session, async (req, res) => {
    const body = parse(authorizeBody, req.body ?? {});
    const { orgKey } = await approveUserCode(deps, {
      userCode: body.user_code,
      userId: principalOf(req).userId,
      ...(body.client_id ? { orgKey: body.client_id } : {}),
    });
    res.json({ status: 'approved', client_id: orgIdOf(orgKey) });
  });

  router.post('/v1/auth/device/deny', session, async (req, res) => {
    const body = parse(denyBody, req.body ?? {});
    await denyUserCode(deps, { userCode: body.user_code, userId: principalOf(req).userId });
    res.json({ status: 'denied' });
  });

  router.post('/v1/auth/device/poll', async (req, res) => {
    // The answer may carry a credential: never cached (RFC 6749 §5.1, as for any token response).
    res.set('Cache-Control', 'no-store');
    const body = parse(pollBody, req.body ?? {});
    const result = await failClosed(() =>
      pollDeviceCode(deps, body.device_code, 'terminal', async (tx, row) => {
        // Revalidated at hand-out: a person removed between approval and poll gets no credential.
        if (!row.userId || !row.orgId || !(await liveRole(tx, row.userId, row.orgId))) return null;
        const [user] = await tx.select({ email: users.email }).from(users).where(eq(users.id, row.userId));
        // Rotates only this user's previous credential in this org; teammates keep theirs (Authentication 3).
        const { secret } = await mintApiToken(tx, deps.keys.hmac, {
          userId: row.userId,
          orgKey: row.orgId,
          tokenName: DEVICE_TOKEN_NAME,
          origin: auditOriginOf(req),
        });
        return { token: secret, clientId: orgIdOf(row.orgId), email: user!.email };
      }),
    );
    switch (result.status) {
      case 'approved': {
        const issued = result.issued;
        if (!issued) {
          res.status(400).json({ status: 'access_denied' });
          return;
        }
        res.json({
          status: 'complete',
          token: issued.token,
          client_id: issued.clientId,
          email: issued.email,
        });
        return;
      }
      case 'slow_down':
        res.json({ status: 'slow_down', interval: result.interval });
        return;
      case 'authorization_pending':
        res.json({ status: 'authorization_pending' });
        return;
      default:
        // access_denied, expired_token: 400 like RFC 8628 §3.5 error responses (CONTRACT §6).
        res.status(400).json({ status: result.status });
    }
  });

  // approve and deny write after their lookup: a database lost in between is 503, not 500.
  router.use('/v1', databaseOutageAs503(deps.db));
  return router;
}
