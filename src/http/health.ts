import { Router } from 'express';
import { sql } from 'drizzle-orm';
import type { Deps } from '../deps.js';

// GET /healthz: the process accepts requests. GET /readyz: the database answers (CONTRACT §1).
export function healthRoutes(deps: Deps): Router {
  const router = Router();
  router.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  router.get('/readyz', async (_req, res) => {
    try {
      await deps.db.execute(sql`select 1`);
      res.json({ status: 'ok' });
    } catch {
      res.status(503).json({ status: 'unavailable' });
    }
  });
  return router;
}
