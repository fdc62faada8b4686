import type { RequestHandler } from 'express';
import { Redis } from 'ioredis';
import {
  RateLimiterMemory,
  RateLimiterPostgres,
  RateLimiterRedis,
  RateLimiterRes,
  type RateLimiterAbstract,
} from 'rate-limiter-flexible';
import type { Config } from '../config.js';
import type { Database } from '../db/client.js';
import type { Logger } from '../log.js';
import { rateLimited } from '../http/errors.js';
import { clientAddress } from '../http/client-address.js';
import { createModelRateLimits, type ModelRateLimits } from './model-limits.js';
import { createPostgresWindows } from './rolling-window-postgres.js';
import { createRedisWindows } from './rolling-window-redis.js';
import type { RollingWindows } from './rolling-window.js';
import { createFailureLimiter, storeKey, type FailureLimiter, type Policy } from './failure-limiter.js';

// The rate limits of CONTRACT §1 on rate-limiter-flexible. The store follows the deployment so that
// every process sharing the data shares the counts: Redis when REDIS_URL is set, else the PostgreSQL
// database when DATABASE_URL is set (table rate_limits, created by the migration), else memory (PGlite
// is one process by construction). A store error falls back to a per-process memory limiter
// (insuranceLimiter), so an outage of the store never turns sign-in into a 500. The model RPM and TPM
// limits are rolling windows of their own in the same kind of store (modelWindows below).

export interface Limits {
  /** Wrong passwords per e-mail (CONTRACT §4). Key: the normalised e-mail. */
  loginFailures: FailureLimiter;
  /**
   * Wrong 2FA codes per user across challenges and the enable/disable routes. The per-challenge rule
   * (5 wrong codes burn it) is kept in the challenge row (src/accounts/two-factor.ts).
   */
  twoFactorFailures: FailureLimiter;
  /** Reset (and verification resend) requests per e-mail. Every request counts, not only failures. */
  resetRequests: FailureLimiter;
  /** Wrong device user codes per user: 10 in 10 min → 429 (CONTRACT §6). Key: the user id. */
  userCodeFailures: FailureLimiter;
  /** Wrong invitation tokens per user: 10 in 10 min → 429. Key: the user id. */
  invitationFailures: FailureLimiter;
  /**
   * Invitation mails (docs/limits.md § Invitation mail): every invitation sent counts, whatever becomes of
   * it (a revoked or replaced one included), per inviter (key: user id) and per recipient mailbox (key:
   * the address as the trial rule normalises it, so plus-tags and Gmail dots are one mailbox).
   */
  invitationsPerInviter: FailureLimiter;
  invitationsPerAddressDay: FailureLimiter;
  /** The first invitation to a mailbox and one re-send in the hour. */
  invitationsPerAddressHour: FailureLimiter;
  /** Re-sends of one open invitation (key: its id), over any invitation's whole life. */
  invitationResendsPerInvitation: FailureLimiter;
  /** Re-sends from one organization (key: the organization), a day. */
  invitationResendsPerOrg: FailureLimiter;
  /**
   * Mails telling a person they were added to, re-roled in or removed from an organization, per
   * recipient mailbox (key: as for invitations). Past it the change is made and the mail is left out.
   */
  memberMailsPerAddress: FailureLimiter;
  /** RATE_LIMIT_IP_PER_MIN requests a minute per address on sign-in, registration, reset, 2FA, device routes. */
  perIp: RequestHandler;
  /** RPM and TPM limits of model calls per organization and credential (CONTRACT §11), in the same store. */
  modelRates: ModelRateLimits;
}

/** A Node timer waits at most 2^31 - 1 ms (about 24.8 days); a longer one fires at once. */
export const MAX_WINDOW_SECONDS = Math.floor((2 ** 31 - 1) / 1000);

export const POLICIES = {
  loginFailures: { name: 'login', points: 10, durationSeconds: 15 * 60 },
  twoFactorFailures: { name: '2fa', points: 10, durationSeconds: 15 * 60 },
  resetRequests: { name: 'reset', points: 5, durationSeconds: 60 * 60 },
  userCodeFailures: { name: 'usercode', points: 10, durationSeconds: 10 * 60 },
  invitationFailures: { name: 'invitation', points: 10, durationSeconds: 10 * 60 },
  invitationsPerInviter: { name: 'invite-sender', points: 20, durationSeconds: 24 * 3600 },
  invitationsPerAddressDay: { name: 'invite-to-day', points: 4, durationSeconds: 24 * 3600 },
  invitationsPerAddressHour: { name: 'invite-to-hour', points: 2, durationSeconds: 3600 },
  // The window opens at an invitation's first re-send, after which it lives at most 21 days (each re-send
  // gives it 7 more, three at most): 22 days covers it, and stays under the longest wait of a Node timer
  // (MAX_WINDOW_SECONDS), which ends an entry in the memory store.
  invitationResendsPerInvitation: { name: 'invite-resend', points: 3, durationSeconds: 22 * 24 * 3600 },
  invitationResendsPerOrg: { name: 'invite-resend-org', points: 20, durationSeconds: 24 * 3600 },
  memberMailsPerAddress: { name: 'member-mail', points: 10, durationSeconds: 24 * 3600 },
} as const satisfies Record<string, Policy>;

export interface LimitsContext {
  config: Pick<Config, 'redisUrl' | 'rateLimitIpPerMin' | 'trustProxy'>;
  database: Pick<Database, 'kind' | 'pool' | 'db'>;
  hmacKey: Buffer;
  log: Logger;
  onClose(fn: () => Promise<void> | void): void;
}

type Factory = (policy: Policy) => RateLimiterAbstract;

function storeFactory(ctx: LimitsContext): Factory {
  const memory: Factory = (p) =>
    new RateLimiterMemory({ keyPrefix: p.name, points: p.points, duration: p.durationSeconds });

  if (ctx.config.redisUrl) {
    // enableOfflineQueue off: a command while Redis is down fails at once and the insurance limiter
    // answers, instead of queueing behind a dead connection (rate-limiter-flexible's advice).
    const redis = new Redis(ctx.config.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    let lastWarn = 0;
    redis.on('error', (err: Error) => {
      if (Date.now() - lastWarn < 60_000) return;
      lastWarn = Date.now();
      ctx.log.warn({ err: err.message }, 'rate-limit store (redis) unavailable; using per-process limits');
    });
    ctx.onClose(() =>
      redis.quit().then(
        () => undefined,
        () => redis.disconnect(),
      ),
    );
    return (p) =>
      new RateLimiterRedis({
        storeClient: redis,
        keyPrefix: `svc:rl:${p.name}`,
        points: p.points,
        duration: p.durationSeconds,
        rejectIfRedisNotReady: true,
        insuranceLimiter: memory(p),
      });
  }

  if (ctx.database.kind === 'postgres' && ctx.database.pool) {
    const pool = ctx.database.pool;
    let sweeper = true;
    return (p) => {
      const limiter = new RateLimiterPostgres({
        storeClient: pool,
        storeType: 'pool',
        tableName: 'rate_limits',
        // The migration created the table: no DDL at start-up, so start-up cannot fail here.
        tableCreated: true,
        // One limiter sweeps expired rows (the table is shared); its timer is unref'd.
        clearExpiredByTimeout: sweeper,
        keyPrefix: p.name,
        points: p.points,
        duration: p.durationSeconds,
        insuranceLimiter: memory(p),
      });
      sweeper = false;
      return limiter;
    };
  }

  return memory;
}

/**
 * The rolling windows of the RPM and TPM limits, in the store the concurrency cap uses: Redis when
 * REDIS_URL is set, else the database (PGlite included). Unlike the sign-in limits they have no per-process
 * fallback: a store that does not answer refuses the call with 503 (as the concurrency cap does), since
 * counting per process would let every process admit the whole limit.
 */
function modelWindows(ctx: LimitsContext): RollingWindows {
  if (!ctx.config.redisUrl) return createPostgresWindows(ctx.database.db, ctx.log);
  // Its own connection, queueing while it connects: a call in the first moments after start waits for
  // Redis instead of failing.
  const redis = new Redis(ctx.config.redisUrl, { maxRetriesPerRequest: 1 });
  redis.on('error', () => {
    // Reconnects by itself; a call while it is down is answered 503 by the model limits.
  });
  ctx.onClose(() => redis.disconnect());
  return createRedisWindows(redis);
}

export function createLimits(ctx: LimitsContext): Limits {
  const make = storeFactory(ctx);
  const failure = (p: Policy) => createFailureLimiter(make(p), ctx.hmacKey);
  const ipLimiter = make({ name: 'ip', points: ctx.config.rateLimitIpPerMin, durationSeconds: 60 });

  const perIp: RequestHandler = async (req, res, next) => {
    // The right-most address no trusted proxy stands behind (CONTRACT §1): a client-written
    // X-Forwarded-For never picks the key (src/http/client-address.ts).
    const address = clientAddress(req, ctx.config);
    try {
      const r = await ipLimiter.consume(storeKey(ctx.hmacKey, address), 1);
      res.setHeader('RateLimit-Remaining', String(r.remainingPoints));
    } catch (rejection) {
      if (rejection instanceof RateLimiterRes) throw rateLimited(rejection.msBeforeNext / 1000);
      throw rejection;
    }
    next();
  };

  const modelRates = createModelRateLimits({ db: ctx.database.db, windows: modelWindows(ctx), log: ctx.log });
  ctx.onClose(() => modelRates.close());

  return {
    modelRates,
    loginFailures: failure(POLICIES.loginFailures),
    twoFactorFailures: failure(POLICIES.twoFactorFailures),
    resetRequests: failure(POLICIES.resetRequests),
    userCodeFailures: failure(POLICIES.userCodeFailures),
    invitationFailures: failure(POLICIES.invitationFailures),
    invitationsPerInviter: failure(POLICIES.invitationsPerInviter),
    invitationsPerAddressDay: failure(POLICIES.invitationsPerAddressDay),
    invitationsPerAddressHour: failure(POLICIES.invitationsPerAddressHour),
    invitationResendsPerInvitation: failure(POLICIES.invitationResendsPerInvitation),
    invitationResendsPerOrg: failure(POLICIES.invitationResendsPerOrg),
    memberMailsPerAddress: failure(POLICIES.memberMailsPerAddress),
    perIp,
  };
}
