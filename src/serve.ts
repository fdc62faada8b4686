import type { Config } from './config.js';
import { openDatabase } from './db/client.js';
import { allowedConnections, poolPlan } from './db/pool-size.js';
import { runMigrations } from './db/migrate.js';
import { createDeps } from './create-deps.js';
import { createLogger, resolveLogFormat, type Logger } from './log.js';
import { startServer } from './server.js';
import { startBanner } from './banner.js';
import { ServerSecretsError } from './crypto/server-secrets.js';
import cluster from 'node:cluster';
import { runPrimary } from './cluster.js';
import { joinClusterMetrics } from './metrics/cluster.js';
import { stopTracing } from './telemetry/spans.js';

// The composition root (STYLE: one place opens the database and builds the services from the config),
// run by the process entry (src/main.ts) once it has read the config and started tracing or decided not to.

export async function serve(config: Config) {
  const log = createLogger(config.logLevel, resolveLogFormat(config.logFormat, config.devMode));
  const where = config.databaseUrl ? 'PostgreSQL (DATABASE_URL)' : `embedded PGlite in ${config.dataDir}`;
  const database = await openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    queryTimeoutMs: config.reliability.queryTimeoutMs,
    poolSize: await poolSize(config, log),
  });
  // One migration run: by the single process, or by the cluster's primary before any worker starts.
  if (!cluster.isWorker) await runMigrations(database);
  if (process.argv.includes('--migrate-only')) {
    log.info({ storage: database.kind }, 'migrations applied');
    await database.close();
    return;
  }
  if (cluster.isPrimary && config.webConcurrency > 1) {
    // The primary serves nothing and keeps no connection (src/cluster.ts).
    await database.close();
    runPrimary({
      workers: config.webConcurrency,
      log,
      graceMs: config.reliability.shutdownGraceMs,
      socketCaps: { perOrg: config.limits.runSocketsPerOrg, perUser: config.limits.runSocketsPerUser },
      onReady: () =>
        process.stdout.write(
          startBanner(config, {
            storage: where,
            listening: `${config.host}:${config.port}, ${config.webConcurrency} worker processes`,
          }),
        ),
    });
    return;
  }
  let deps;
  try {
    deps = await createDeps(config, database, log);
  } catch (err) {
    // A sealed server secret and no (or the wrong) KEY_ENCRYPTION_KEY: say so, like a bad variable.
    if (err instanceof ServerSecretsError) {
      process.stderr.write(`svc: ${err.message}\n`);
      await database.close();
      process.exit(2);
    }
    throw err;
  }
  const server = await startServer(deps, [config.host], config.port);

  log.info({ url: config.baseUrl, storage: database.kind, worker: cluster.worker?.id }, 'svc listening');
  // A worker leaves the banner to its primary, which prints it once all listen.
  if (!cluster.isWorker)
    process.stdout.write(startBanner(config, { storage: where, listening: `${config.host}:${server.port}` }));

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down');
    await server.close();
    await deps.close();
    await database.close();
    await stopTracing(); // the spans still buffered leave before the process does
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  if (cluster.isWorker) {
    // A worker whose primary is gone (killed with -9) gets no more connections: it shuts down too.
    process.on('disconnect', () => void stop('primary gone'));
    // Its metrics join the cluster's /metrics answer, whichever worker is scraped.
    joinClusterMetrics();
  }
}

/**
 * Each process's PostgreSQL pool (src/db/pool-size.ts): decided once, by the one process or by the
 * cluster's primary, which hands it to its workers in their environment (node:cluster forks with this
 * process's). A start that cannot fit the server's connections refuses, as a bad variable does.
 */
async function poolSize(config: Config, log: Logger): Promise<number | undefined> {
  if (!config.databaseUrl || cluster.isWorker || process.argv.includes('--migrate-only'))
    return config.databasePoolSize;
  const processes = config.webConcurrency;
  const plan = poolPlan({
    processes,
    allowed: await allowedConnections(config.databaseUrl),
    requested: config.databasePoolSize,
  });
  if ('refused' in plan) {
    process.stderr.write(`svc: invalid configuration:\n  ${plan.refused}\n`);
    process.exit(2);
  }
  if (plan.note) log.warn({ poolSize: plan.size, processes }, plan.note);
  process.env.DATABASE_POOL_SIZE = String(plan.size);
  return plan.size;
}
