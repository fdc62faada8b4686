import { Router } from 'express';
import type { Deps } from '../src/deps.js';
import type { Auth } from '../src/auth/principal.js';

// Routes of this domain are built by its issue.
export function oauthRoutes(_deps: Deps, _auth: Auth): Router {
  return Router();
}
