import { Router } from 'express';
import type { Deps } from '../deps.js';
import { databaseAnswers } from '../db/outage.js';
import { UNAVAILABLE_RETRY_AFTER_SECONDS } from './errors.js';

/**
 * /readyz waits at most this long for the database: a load balancer's probe must get an answer in time
 * even when the database is black-holed (docs/operations.md).
 */
export const READYZ_TIMEOUT_MS = 2_000;

// GET /healthz: the process accepts requests. GET /readyz: the database answers (CONTRACT §1), and the
// process is not shutting down (a draining process takes no new traffic).
export function healthRoutes(deps: Deps): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', async (_req, res) => {
    if (deps.lifecycle.draining || !(await databaseAnswers(deps.db, READYZ_TIMEOUT_MS))) {
      res.setHeader('Retry-After', String(UNAVAILABLE_RETRY_AFTER_SECONDS));
      res.status(503).json({ status: 'unavailable' });
      return;
    }
    res.json({ status: 'ok' });
  });
  return router;
}
