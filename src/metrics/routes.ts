import { createHash, timingSafeEqual } from 'node:crypto';
import { Router } from 'express';
import { sql } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { bearerOf } from '../http/bearer.js';
import { queryRows } from '../db/client.js';
import { clusterMetricsText, inCluster } from './cluster.js';
import {
  heldCredits,
  holdsOutstanding,
  leasesOutstanding,
  registry,
  stateRegistry,
  watchLimiter,
  watchPool,
  watchUpstream,
} from './registry.js';
import { METRICS_ERRORS } from './errors.js';

// GET /metrics in the Prometheus text format (docs/operations.md § Metrics). Guarded by METRICS_TOKEN
// (a bearer, compared in constant time); without it the route does not exist (404), so metrics are never
// public by accident. The database gauges are read at scrape, one statement. In a cluster the answer is
// every worker's, aggregated by the primary (./cluster.ts).

const digest = (value: string) => createHash('sha256').update(value).digest();

export function metricsRoutes(deps: Deps): Router {
  const router = Router();
  const expected = deps.config.metricsToken ? digest(deps.config.metricsToken) : null;
  if (expected) {
    watchPool(deps.database.pool ?? undefined);
    watchUpstream(deps.models.upstream);
    watchLimiter(deps.models.limiter);
  }

  router.get('/metrics', async (req, res) => {
    if (!expected) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such route');
    const bearer = bearerOf(req.get('authorization'));
    if (!bearer || !timingSafeEqual(digest(bearer), expected)) {
      throw errorOf(COMMON_ERRORS, 'INVALID_TOKEN', 'the metrics token is missing or wrong', {
        headers: { 'WWW-Authenticate': 'Bearer realm="metrics"' },
      });
    }
    await readGauges(deps);
    const processes = inCluster()
      ? await clusterMetricsText().catch((err: Error) => {
          deps.log.warn({ err }, 'metrics: the cluster did not answer');
          throw errorOf(METRICS_ERRORS, 'METRICS_UNAVAILABLE', 'the cluster did not answer; try again');
        })
      : await registry.metrics();
    res.set('Content-Type', registry.contentType);
    res.set('Cache-Control', 'no-store');
    res.send(processes + (await stateRegistry.metrics()));
  });
  return router;
}

async function readGauges(deps: Deps): Promise<void> {
  // A database that does not answer leaves the gauges at their last value; the scrape still succeeds.
  try {
    const [row] = await queryRows<{ holds: unknown; held: unknown; leases: unknown }>(
      deps.db,
      sql`select (select count(*) from billing_holds where status = 'held') as holds,
                 (select coalesce(sum(amount), 0) from billing_holds where status = 'held') as held,
                 (select count(*) from concurrency_leases where expires_at > now()) as leases`,
    );
    holdsOutstanding.set(Number(row?.holds ?? 0));
    heldCredits.set(Number(row?.held ?? 0));
    leasesOutstanding.set(Number(row?.leases ?? 0));
  } catch (err) {
    deps.log.warn({ err }, 'metrics: database gauges not read');
  }
}
