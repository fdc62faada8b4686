import { availableParallelism } from 'node:os';
import { z } from 'zod';
import proxyaddr from 'proxy-addr';
import { productionProblems } from './production.js';

// Every variable the contract names (CONTRACT §1), all optional. A bad value stops start-up with a
// message naming the variable; nothing else in the code reads process.env.

const bool = z
  .enum(['1', '0', 'true', 'false', 'yes', 'no', 'on', 'off', ''])
  .transform((v) => ['1', 'true', 'yes', 'on'].includes(v));

const url = z.url({ protocol: /^https?$/ }).transform((v) => v.replace(/\/+$/, ''));
const port = z.coerce.number().int().min(0).max(65535);
const positiveInt = z.coerce.number().int().positive();
const nonNegative = z.coerce.number().min(0);

/**
 * Which peers are proxies whose X-Forwarded-For (and X-Forwarded-Host) is believed (CONTRACT §1): how
 * many stand in front (`hops`), or their addresses (`addresses`: addresses, CIDRs, or proxy-addr's names
 * `loopback`, `linklocal`, `uniquelocal`). Unset: none, the socket's address is the client's.
 */
export type TrustProxy = { hops: number } | { addresses: string[] } | undefined;

// `true` is refused: trusting every hop makes the left-most X-Forwarded-For, which the client writes,
// the address rate limits are keyed on. `0`, `false`, `off`, `no`: no proxy.
const trustProxy = z.string().transform((raw, ctx): TrustProxy => {
  const v = raw.trim().toLowerCase();
  if (['', '0', 'false', 'off', 'no'].includes(v)) return undefined;
  if (['true', 'yes', 'on'].includes(v)) {
    ctx.addIssue({
      code: 'custom',
      message: `'${raw}' is not accepted: give how many proxies stand in front (1, 2, …) or their addresses (a comma-separated list of addresses or CIDRs)`,
    });
    return z.NEVER;
  }
  if (/^\d+$/.test(v)) {
    const hops = Number(v);
    if (hops <= 64) return { hops };
    ctx.addIssue({ code: 'custom', message: 'a hop count is at most 64' });
    return z.NEVER;
  }
  const addresses = v.split(',').map((a) => a.trim());
  try {
    proxyaddr.compile(addresses); // throws on anything that is not an address, a CIDR or a known name
  } catch (e) {
    ctx.addIssue({
      code: 'custom',
      message: `not a hop count or a list of addresses/CIDRs (${(e as Error).message})`,
    });
    return z.NEVER;
  }
  return { addresses };
});

const envSchema = z.object({
  NODE_ENV: z.string().optional(),
  PORT: port.default(8080),
  HOST: z.string().min(1).default('127.0.0.1'),
  BASE_URL: url.optional(),
  V2_URL: url.optional(),
  LIGHT_URL: url.optional(),
  TRUST_PROXY: trustProxy.optional(),
  DATABASE_URL: z
    .string()
    .regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL')
    .optional(),
  DATABASE_POOL_SIZE: z.coerce.number().int().min(2).max(1000).optional(),
  DATA_DIR: z.string().min(1).default('./data'),
  DEV_MODE: bool.optional(),
  SMTP_URL: z
    .string()
    .regex(/^smtps?:\/\//, 'must be an smtp:// or smtps:// URL')
    .optional(),
  MAIL_FROM: z.string().min(3).default('svc <no-reply@localhost>'),
  SESSION_SECRET: z.string().min(32, 'must be at least 32 characters').optional(),
  KEY_ENCRYPTION_KEY: z.string().min(32, 'must be at least 32 characters').optional(),
  STRIPE_SECRET_KEY: z.string().min(1).optional(),
  STRIPE_WEBHOOK_SECRET: z.string().min(1).optional(),
  STRIPE_API_BASE: url.optional(),
  STRIPE_PRICE_PRO: z.string().min(1).default('price_pro'),
  MODEL_UPSTREAM_URL: url.optional(),
  MODEL_UPSTREAM_KEY: z.string().min(1).optional(),
  // Which API the provider speaks for POST /v1/responses: `chat` (svc translates to
  // {url}/chat/completions) or `responses` (the request is passed through to {url}/responses).
  MODEL_UPSTREAM_API: z.enum(['chat', 'responses']).default('chat'),
  MODEL_ID: z.string().min(1).optional(),
  MODEL_PRICE_INPUT: nonNegative.default(300),
  MODEL_PRICE_OUTPUT: nonNegative.default(1500),
  // Cents per million prompt tokens the provider served from its cache; unset: the
  // input price, so cached tokens cost what any prompt token costs.
  MODEL_PRICE_CACHED_INPUT: nonNegative.optional(),
  // The most tokens one image / audio / file content part can cost at the provider (CONTRACT §8: the
  // reserve is an upper bound); unset: parts of that kind are refused with 400.
  MODEL_PART_TOKENS_IMAGE: positiveInt.optional(),
  MODEL_PART_TOKENS_AUDIO: positiveInt.optional(),
  MODEL_PART_TOKENS_FILE: positiveInt.optional(),
  ORG_MAX_CONCURRENCY: positiveInt.default(4),
  RUN_MAX_STEPS: positiveInt.default(16),
  AGENTS_FILE: z.string().min(1).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  RATE_LIMIT_IP_PER_MIN: positiveInt.default(120),
  DATABASE_QUERY_TIMEOUT_MS: z.coerce.number().int().min(0).max(600_000).default(5_000),
  SHUTDOWN_GRACE_SECONDS: z.coerce.number().min(0).max(3_600).default(30),
  SETTLE_SPOOL_FILE: z.string().min(1).optional(),
  PROCESS_DEAD_AFTER_MS: z.coerce.number().int().min(1_000).max(600_000).default(4_000),
  MODEL_UPSTREAM_CONNECT_TIMEOUT_MS: positiveInt.default(10_000),
  MODEL_UPSTREAM_HEADERS_TIMEOUT_MS: positiveInt.default(60_000),
  MODEL_UPSTREAM_BODY_IDLE_TIMEOUT_MS: positiveInt.default(30_000),
  STREAM_STALL_TIMEOUT_MS: positiveInt.default(30_000),
  REDIS_URL: z
    .string()
    .regex(/^rediss?:\/\//, 'must be a redis:// URL')
    .optional(),
  // Request limits (docs/limits.md).
  REQUEST_BODY_IDLE_TIMEOUT_MS: z.coerce.number().int().min(0).max(3_600_000).default(30_000),
  REQUEST_BODY_TIMEOUT_MS: z.coerce.number().int().min(0).max(3_600_000).default(30_000),
  RUN_SOCKETS_PER_ORG: positiveInt.default(32),
  RUN_SOCKETS_PER_USER: positiveInt.default(8),
  // docs/operations.md: GET /metrics answers only a bearer of this token (unset: /metrics is 404).
  METRICS_TOKEN: z.string().min(24, 'must be at least 24 characters').optional(),
  // json (one object a line), pretty (one readable line a request), or auto: pretty on a terminal in
  // DEV_MODE, json otherwise.
  LOG_FORMAT: z.enum(['auto', 'json', 'pretty']).default('auto'),
  // Outbound events (docs/billing.md): the first retry's delay; each later one is 3× the last.
  WEBHOOK_RETRY_BASE_MS: z.coerce.number().int().min(10).max(3_600_000).default(30_000),
  // Worker processes sharing the port (src/cluster.ts, docs/operations.md): a number, or auto = the cores.
  WEB_CONCURRENCY: z.union([z.literal('auto'), z.coerce.number().int().min(1).max(64)]).default(1),
});

/**
 * The most tokens a non-text content part can cost, per kind (CONTRACT §8: the reserve is an upper bound
 * for every kind of input): MODEL_PART_TOKENS_IMAGE, _AUDIO, _FILE. A kind left unset is refused (400).
 */
export interface PartTokens {
  image?: number;
  audio?: number;
  file?: number;
}

export type Env = z.input<typeof envSchema>;

export interface Config {
  port: number;
  host: string;
  baseUrl: string;
  v2Url: string;
  lightUrl: string;
  /** Proxies whose forwarding headers are believed (src/http/client-address.ts); undefined: none. */
  trustProxy: TrustProxy;
  databaseUrl: string | undefined;
  /** Each process's PostgreSQL pool, when DATABASE_POOL_SIZE sets it (else sized at start: src/db/pool-size.ts). */
  databasePoolSize: number | undefined;
  dataDir: string;
  devMode: boolean;
  production: boolean;
  smtpUrl: string | undefined;
  mailFrom: string;
  sessionSecret: string | undefined;
  /** Seals the generated server secrets in the database (src/crypto/server-secrets.ts); required in production. */
  keyEncryptionKey: string | undefined;
  stripe: {
    secretKey: string | undefined;
    webhookSecret: string | undefined;
    apiBase: string | undefined;
    pricePro: string;
  };
  model: {
    upstreamUrl: string | undefined;
    upstreamKey: string | undefined;
    /** `responses`: POST /v1/responses is passed through to the provider's own (docs/models.md). */
    upstreamApi: 'chat' | 'responses';
    /** The model every call is forced to (interface document: "the server forces the model"). */
    id: string;
    /** Cents per million input / output tokens (CONTRACT §9). */
    priceInput: number;
    priceOutput: number;
    /** Cents per million cached prompt tokens (docs/models.md): at most priceInput, which is its default. */
    priceCachedInput: number;
    partTokens: PartTokens;
  };
  orgMaxConcurrency: number;
  runMaxSteps: number;
  agentsFile: string | undefined;
  logLevel: string;
  rateLimitIpPerMin: number;
  redisUrl: string | undefined;
  /** Request limits (docs/limits.md). */
  limits: {
    /** A request body with no byte for this long is answered 408 and its connection closed (0: off). */
    bodyIdleTimeoutMs: number;
    /** A request body not complete this long after the request began: 408 and the connection closed (0: off). */
    bodyTimeoutMs: number;
    /** Authenticated run sockets open at once, per organization and per user, in one process. */
    runSocketsPerOrg: number;
    runSocketsPerUser: number;
  };
  /** Every bound on a wait, and what shutdown and a dead peer are given (docs/operations.md). */
  reliability: {
    /** statement_timeout on every database connection (0: none). */
    queryTimeoutMs: number;
    /** How long requests in flight may finish after SIGTERM before their connections are closed. */
    shutdownGraceMs: number;
    /** Where settles that could not be written are kept across a restart (unset with an in-memory DATA_DIR). */
    settleSpoolFile: string | undefined;
    /** A process whose heartbeat is older than this is dead: its leases and holds are reclaimed. */
    processDeadAfterMs: number;
    /** A stream whose client takes nothing for this long is ended (and billed for what it got). */
    streamStallMs: number;
  };
  upstreamTimeouts: { connectMs: number; headersMs: number; bodyIdleMs: number };
  metricsToken: string | undefined;
  logFormat: 'auto' | 'json' | 'pretty';
  /** How many worker processes serve the port (1: this process serves, no cluster). */
  webConcurrency: number;
  /** Outbound event deliveries (src/events/delivery.ts): the first retry's delay, ×3 for each next one. */
  webhookRetryBaseMs: number;
}

export class ConfigError extends Error {}

/**
 * WEB_CONCURRENCY resolved. The embedded PGlite database belongs to one process (it holds its data
 * directory alone), so without DATABASE_URL `auto` means 1, and an explicit number above 1 is refused
 * rather than silently lowered: the operator asked for something this storage cannot do.
 */
function workerCount(setting: 'auto' | number, databaseUrl: string | undefined): number {
  if (!databaseUrl) {
    if (setting === 'auto' || setting === 1) return 1;
    throw new ConfigError(
      `invalid configuration:\n  WEB_CONCURRENCY: ${setting} worker processes need PostgreSQL (DATABASE_URL); ` +
        'the embedded database serves one process (use 1 or auto)',
    );
  }
  return setting === 'auto' ? availableParallelism() : setting;
}

/** Parses the environment once; throws ConfigError naming every bad variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const known = Object.fromEntries(
    Object.keys(envSchema.shape)
      .filter((k) => env[k] !== undefined && !(env[k] === '' && k !== 'DEV_MODE'))
      .map((k) => [k, env[k]]),
  );
  const parsed = envSchema.safeParse(known);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  const e = parsed.data;
  const production = e.NODE_ENV === 'production';
  const fallback = `http://localhost:${e.PORT}`;
  const config: Config = {
    port: e.PORT,
    host: e.HOST,
    baseUrl: e.BASE_URL ?? fallback,
    v2Url: e.V2_URL ?? fallback,
    lightUrl: e.LIGHT_URL ?? fallback,
    trustProxy: e.TRUST_PROXY,
    databaseUrl: e.DATABASE_URL,
    databasePoolSize: e.DATABASE_POOL_SIZE,
    dataDir: e.DATA_DIR,
    devMode: e.DEV_MODE ?? !production,
    production,
    smtpUrl: e.SMTP_URL,
    mailFrom: e.MAIL_FROM,
    sessionSecret: e.SESSION_SECRET,
    keyEncryptionKey: e.KEY_ENCRYPTION_KEY,
    stripe: {
      secretKey: e.STRIPE_SECRET_KEY,
      webhookSecret: e.STRIPE_WEBHOOK_SECRET,
      apiBase: e.STRIPE_API_BASE,
      pricePro: e.STRIPE_PRICE_PRO,
    },
    model: {
      upstreamUrl: e.MODEL_UPSTREAM_URL,
      upstreamKey: e.MODEL_UPSTREAM_KEY,
      upstreamApi: e.MODEL_UPSTREAM_API,
      id: e.MODEL_ID ?? (e.MODEL_UPSTREAM_URL ? 'gpt-4o-mini' : 'svc-local'),
      priceInput: e.MODEL_PRICE_INPUT,
      priceOutput: e.MODEL_PRICE_OUTPUT,
      priceCachedInput: e.MODEL_PRICE_CACHED_INPUT ?? e.MODEL_PRICE_INPUT,
      partTokens: {
        ...(e.MODEL_PART_TOKENS_IMAGE ? { image: e.MODEL_PART_TOKENS_IMAGE } : {}),
        ...(e.MODEL_PART_TOKENS_AUDIO ? { audio: e.MODEL_PART_TOKENS_AUDIO } : {}),
        ...(e.MODEL_PART_TOKENS_FILE ? { file: e.MODEL_PART_TOKENS_FILE } : {}),
      },
    },
    orgMaxConcurrency: e.ORG_MAX_CONCURRENCY,
    runMaxSteps: e.RUN_MAX_STEPS,
    agentsFile: e.AGENTS_FILE,
    logLevel: e.LOG_LEVEL,
    rateLimitIpPerMin: e.RATE_LIMIT_IP_PER_MIN,
    redisUrl: e.REDIS_URL,
    limits: {
      bodyIdleTimeoutMs: e.REQUEST_BODY_IDLE_TIMEOUT_MS,
      bodyTimeoutMs: e.REQUEST_BODY_TIMEOUT_MS,
      runSocketsPerOrg: e.RUN_SOCKETS_PER_ORG,
      runSocketsPerUser: e.RUN_SOCKETS_PER_USER,
    },
    reliability: {
      queryTimeoutMs: e.DATABASE_QUERY_TIMEOUT_MS,
      shutdownGraceMs: e.SHUTDOWN_GRACE_SECONDS * 1000,
      settleSpoolFile:
        e.SETTLE_SPOOL_FILE ??
        (e.DATA_DIR.startsWith('memory://')
          ? undefined
          : `${e.DATA_DIR.replace(/\/+$/, '')}/settle-spool.jsonl`),
      processDeadAfterMs: e.PROCESS_DEAD_AFTER_MS,
      streamStallMs: e.STREAM_STALL_TIMEOUT_MS,
    },
    upstreamTimeouts: {
      connectMs: e.MODEL_UPSTREAM_CONNECT_TIMEOUT_MS,
      headersMs: e.MODEL_UPSTREAM_HEADERS_TIMEOUT_MS,
      bodyIdleMs: e.MODEL_UPSTREAM_BODY_IDLE_TIMEOUT_MS,
    },
    metricsToken: e.METRICS_TOKEN,
    logFormat: e.LOG_FORMAT,
    webhookRetryBaseMs: e.WEBHOOK_RETRY_BASE_MS,
    webConcurrency: workerCount(e.WEB_CONCURRENCY, e.DATABASE_URL),
  };
  // A hold prices the whole prompt at the input price (cached tokens are known only after the call): a
  // cached price above it would let a debit exceed its hold (CONTRACT §8), so it is refused.
  if (config.model.priceCachedInput > config.model.priceInput)
    throw new ConfigError(
      'invalid configuration:\n  MODEL_PRICE_CACHED_INPUT: must not exceed MODEL_PRICE_INPUT (a hold prices the prompt at the input price)',
    );
  // svc-local speaks only chat: a pass-through needs a provider to pass through to.
  if (config.model.upstreamApi === 'responses' && !config.model.upstreamUrl)
    throw new ConfigError(
      'invalid configuration:\n  MODEL_UPSTREAM_API: `responses` needs MODEL_UPSTREAM_URL (svc-local speaks only chat)',
    );
  // NODE_ENV=production refuses unsafe settings, naming each variable (CONTRACT §1; src/production.ts).
  const problems = production ? productionProblems(config) : [];
  if (problems.length)
    throw new ConfigError(
      `unsafe configuration for NODE_ENV=production:\n${problems.map((p) => `  ${p}`).join('\n')}`,
    );
  return config;
}
