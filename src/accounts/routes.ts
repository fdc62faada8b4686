import { Router } from 'express';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';

/** Sign-in, registration, reset and 2FA routes carry the per-address limit (CONTRACT §1). */
export const PER_IP_PATHS = ['/v1/login', '/v1/logout', '/v1/register', '/v1/2fa', '/v1/password/reset', '/v1/email/verify'];

export function accountRoutes(deps: Deps, _auth: Auth): Router {
  const router = Router();
  router.use(PER_IP_PATHS, deps.limits.perIp);
  return router;
}
