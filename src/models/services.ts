import type { SigningKeys } from '../../oauth/keys.js';
import type { Config } from '../config.js';
import type { Db } from '../db/client.js';
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
  close(): Promise<void>;
}

export function createModelServices(config: Config, db: Db, signingKeys: SigningKeys): ModelServices {
  const upstream = config.model.upstreamUrl
    ? createOpenAICompatibleUpstream({ url: config.model.upstreamUrl, key: config.model.upstreamKey })
    : createLocalUpstream(config.model.id);
  const limiter = config.redisUrl
    ? createRedisLimiter(config.redisUrl, { cap: config.orgMaxConcurrency })
    : createPgLimiter(db, { cap: config.orgMaxConcurrency });
  const services: ModelServices = {
    modelId: config.model.id,
    prices: { input: config.model.priceInput, output: config.model.priceOutput },
    upstream,
    limiter,
    agents: loadAgentCatalog(config.agentsFile),
    outcome: createOutcomeSigner(signingKeys),
    runMaxSteps: config.runMaxSteps,
    async close() {
      await services.limiter.close();
      await services.upstream.close();
    },
  };
  return services;
}
