import type { SigningKeys } from '../../oauth/keys.js';
import type { Config } from '../config.js';
import pg from 'pg';
import { drizzle } from 'drizzle-orm/node-postgres';
import type { Db } from '../db/client.js';
import * as schema from '../db/schema.js';
import { loadAgentCatalog, type AgentCatalog } from './agents.js';
import { createPgLimiter, type ConcurrencyLimiter } from './concurrency.js';
import { createRedisLimiter } from './concurrency-redis.js';
import { createOutcomeSigner, type OutcomeSigner } from './outcome.js';
import type { Prices } from './pricing.js';
import { createLocalUpstream } from './upstream/local.js';
import { createOpenAICompatibleUpstream } from './upstream/openai-compatible.js';
import type { Upstream } from './upstream/types.js';

// The model domain's long-lived parts, built once by createDeps (STYLE: one composition root; nothing
// connects at import time). `upstream` is the configured provider or the built-in svc-local model.

export interface ModelServices {
  /** The forced model id (CONTRACT §9, MODEL_ID; `svc-local` without an upstream). */
  modelId: string;
  prices: Prices;
  upstream: Upstream;
  limiter: ConcurrencyLimiter;
  agents: AgentCatalog;
  outcome: OutcomeSigner;
  runMaxSteps: number;
  /**
   * Where holds are reserved: the same database, through connections whose commits do not wait for the
   * WAL flush (synchronous_commit = off). A hold is temporary state; the settle that follows commits
   * synchronously through the main pool, and the WAL is ordered, so a durable debit implies a durable
   * hold. It keeps a disk flush (≈5 ms here) out of the time to first byte. Same pool with PGlite.
   */
  holdDb: Db;
  close(): Promise<void>;
}

function asyncCommitDb(config: Config, db: Db): { db: Db; close(): Promise<void> } {
  if (!config.databaseUrl) return { db, close: async () => {} };
  const pool = new pg.Pool({
    connectionString: config.databaseUrl,
    max: 10,
    idleTimeoutMillis: 30_000,
    connectionTimeoutMillis: 5_000,
    options: '-c synchronous_commit=off',
  });
  pool.on('error', () => {});
  return { db: drizzle(pool, { schema }) as unknown as Db, close: () => pool.end() };
}

export function createModelServices(config: Config, db: Db, signingKeys: SigningKeys): ModelServices {
  const upstream = config.model.upstreamUrl
    ? createOpenAICompatibleUpstream({ url: config.model.upstreamUrl, key: config.model.upstreamKey })
    : createLocalUpstream(config.model.id);
  const limiter = config.redisUrl
    ? createRedisLimiter(config.redisUrl, { cap: config.orgMaxConcurrency })
    : createPgLimiter(db, { cap: config.orgMaxConcurrency });
  const holds = asyncCommitDb(config, db);
  const services: ModelServices = {
    modelId: config.model.id,
    prices: { input: config.model.priceInput, output: config.model.priceOutput },
    upstream,
    limiter,
    agents: loadAgentCatalog(config.agentsFile),
    outcome: createOutcomeSigner(signingKeys),
    runMaxSteps: config.runMaxSteps,
    holdDb: holds.db,
    async close() {
      await holds.close();
      await services.limiter.close();
      await services.upstream.close();
    },
  };
  return services;
}
