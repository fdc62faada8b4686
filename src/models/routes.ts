import { Router } from 'express';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';

// Routes of this domain are built by its issue.
export function modelRoutes(_deps: Deps, _auth: Auth): Router {
  return Router();
}
