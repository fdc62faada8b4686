import { Router } from 'express';
import type { Deps } from '../src/deps.js';
import type { Auth } from '../src/auth/principal.js';
import { metadataRoutes } from './metadata.js';

// The authorization server (CONTRACT §7), mounted on every origin.
export function oauthRoutes(deps: Deps, _auth: Auth): Router {
  const router = Router();
  router.use(metadataRoutes(deps));
  return router;
}
