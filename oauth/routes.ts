import { Router } from 'express';
import type { Deps } from '../src/deps.js';
import type { Auth } from '../src/auth/principal.js';
import { metadataRoutes } from './metadata.js';
import { OAUTH_CORS_PATHS, oauthCors } from './cors.js';
import { authorizeRoutes } from './authorize.js';
import { deviceAuthorizationRoutes } from './device-grant.js';
import { registrationRoutes } from './register.js';
import { revocationRoutes } from './revocation.js';
import { databaseOutageAs503 } from '../src/db/outage.js';
import { FETCHING_PATHS, limitMetadataFetches } from './fetch-limit.js';

// The authorization server (CONTRACT §7), mounted on every origin; each origin is its own issuer. Its token
// endpoint is a row of the app's route table (oauth/token-entry.ts, src/app.ts), not mounted here.
export function oauthRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  router.use(OAUTH_CORS_PATHS, oauthCors);
  router.use(metadataRoutes(deps));
  router.use(FETCHING_PATHS, limitMetadataFetches(deps));
  router.use(authorizeRoutes(deps, auth));
  router.use(deviceAuthorizationRoutes(deps));
  router.use(registrationRoutes(deps));
  router.use(revocationRoutes(deps));
  // A database outage is 503 temporarily_unavailable with Retry-After here too (src/db/outage.ts), so a
  // client waits and retries instead of reading a fault; a fault while the database answers stays 500.
  router.use(databaseOutageAs503(deps.db));
  return router;
}
