import cluster, { type Worker } from 'node:cluster';
import type { Logger } from 'pino';
import { serveClusterMetrics } from './metrics/cluster.js';
import { serveClusterSocketCaps } from './runs/cluster-socket-caps.js';
import type { SocketCapLimits } from './runs/socket-caps.js';

// WEB_CONCURRENCY > 1 (docs/operations.md, "Every core"): this process becomes the cluster's primary. It
// serves nothing itself; node:cluster shares the port among the workers (on Linux the primary accepts
// and hands connections out round-robin). Each worker is a whole svc (src/main.ts) with its own pool,
// heartbeat tag and leases; caps, balances and rate limits live in PostgreSQL/Redis, so they stay exact
// across workers. The primary:
//  - has already run the migrations once (src/main.ts) — workers never migrate;
//  - starts one worker, and the others once it listens, so the first start's generated secrets and
//    signing key are made by one process and read by the rest;
//  - replaces a worker that dies (after a back-off when it keeps dying young), except one that exits 2
//    (a configuration problem, which a new worker would only repeat): then it stops them all and exits 2;
//  - gathers every worker's metrics for the one that takes a /metrics scrape (src/metrics/cluster.ts);
//  - keeps the one count of run sockets per organization and user for every worker
//    (src/runs/cluster-socket-caps.ts), so RUN_SOCKETS_PER_* hold for the server, not per worker;
//  - on SIGTERM/SIGINT passes SIGTERM to every worker, whose own graceful shutdown runs
//    (SHUTDOWN_GRACE_SECONDS), and exits when they all have: 0 when each exited 0.

/** A worker that dies younger than this is failing at start: its replacement waits, doubling up to 30 s. */
const YOUNG_DEATH_MS = 10_000;
const MAX_BACKOFF_MS = 30_000;

/** What a worker gets after the grace before the primary kills it: its settle retries and spool. */
const AFTER_GRACE_MS = 30_000;

export interface PrimaryOptions {
  workers: number;
  log: Logger;
  /** SHUTDOWN_GRACE_SECONDS in ms: each worker's own bound; the primary waits that plus AFTER_GRACE_MS. */
  graceMs: number;
  /** RUN_SOCKETS_PER_ORG / RUN_SOCKETS_PER_USER, counted here for every worker. */
  socketCaps: SocketCapLimits;
  /** Called once, when every worker of the first start listens (the banner is printed then). */
  onReady(): void;
}

export function runPrimary(opts: PrimaryOptions): void {
  const { workers, log } = opts;
  const slots = new Map<Worker, { slot: number; startedAt: number }>();
  const quickDeaths = new Map<number, number>();
  let stopping = false;
  let exitCode = 0;

  const fork = (slot: number) => {
    // A slot is a position: its replacement takes it over (and its back-off count).
    const worker = cluster.fork();
    slots.set(worker, { slot, startedAt: Date.now() });
  };

  const listened = new Set<number>();
  let othersForked = false;
  let announced = false;
  cluster.on('listening', (worker) => {
    const info = slots.get(worker);
    if (!info) return;
    listened.add(info.slot);
    if (!othersForked) {
      othersForked = true;
      for (let slot = 1; slot < workers; slot++) fork(slot);
    }
    if (!announced && listened.size === workers) {
      announced = true;
      log.info({ workers }, 'every worker listens');
      opts.onReady();
    }
  });

  cluster.on('exit', (worker, code, signal) => {
    const info = slots.get(worker);
    slots.delete(worker);
    if (stopping) {
      // A worker still starting has no SIGTERM handler yet, so the signal ends it: that is a clean stop too.
      const clean = code === 0 || (code === null && signal === 'SIGTERM');
      if (!clean && exitCode === 0) exitCode = code ?? 1;
      if (slots.size === 0) {
        log.info({ exitCode }, 'every worker has stopped');
        process.exit(exitCode);
      }
      return;
    }
    if (!info) return;
    if (code === 2) {
      log.error({ slot: info.slot }, 'a worker refused its configuration (exit 2): stopping every worker');
      stop('worker configuration', 2);
      return;
    }
    const young = Date.now() - info.startedAt < YOUNG_DEATH_MS;
    const deaths = young ? (quickDeaths.get(info.slot) ?? 0) + 1 : 0;
    quickDeaths.set(info.slot, deaths);
    const delay = deaths ? Math.min(MAX_BACKOFF_MS, 1000 * 2 ** (deaths - 1)) : 0;
    log.warn(
      { slot: info.slot, workerPid: worker.process.pid, code, signal, restartInMs: delay },
      'worker died; starting a replacement',
    );
    setTimeout(() => {
      if (!stopping) fork(info.slot);
    }, delay);
  });

  function stop(reason: string, code?: number) {
    if (stopping) return;
    stopping = true;
    if (code !== undefined) exitCode = code;
    log.info({ reason, workers: slots.size }, 'shutting down every worker');
    if (slots.size === 0) process.exit(exitCode);
    // worker.kill() would disconnect first (its servers close at once); SIGTERM runs the worker's own
    // graceful shutdown: 503 shutting_down to new requests, SHUTDOWN_GRACE_SECONDS for those in flight.
    for (const worker of slots.keys()) worker.process.kill('SIGTERM');
    // A worker still there long after its own bounds is stuck: killed, so the primary can exit (1).
    setTimeout(() => {
      for (const worker of slots.keys()) worker.process.kill('SIGKILL');
    }, opts.graceMs + AFTER_GRACE_MS).unref();
  }
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));

  serveClusterMetrics();
  serveClusterSocketCaps(opts.socketCaps);
  fork(0);
}
