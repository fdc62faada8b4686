import type { SigningKeys } from '../../oauth/keys.js';
import { createUpstreamUserIds } from './upstream/upstream-user.js';
import type { PartTokens } from './metering/tokens.js';
import type { Config } from '../config.js';
import type { Db } from '../db/client.js';
import { createBatcher } from '../db/batch.js';
import { spanned } from '../telemetry/spans.js';
import { orgIdOf } from '../ids.js';
import { admitMany, type AdmitInput, type AdmitRow } from './admission/admit.js';
import {
  reserveMany,
  settleMany,
  type ReserveInput,
  type SettleInput,
  type SettleResult,
} from '../billing/spend.js';
import { loadAgentCatalog, type AgentCatalog } from './front-ends/agents.js';
import { createPgLimiter, type ConcurrencyLimiter } from './slot/concurrency.js';
import { createRedisLimiter } from './slot/concurrency-redis.js';
import { createOutcomeSigner, type OutcomeSigner } from './metering/outcome.js';
import { createSpareHolds, type SpareHolds } from './admission/spare-holds.js';
import { voidHold, voidHolds } from '../billing/spend.js';
import { settleWithExcess } from '../billing/debt.js';
import { createPendingSettles, type PendingSettles } from './metering/pending-settles.js';
import { createLiveness, type Liveness } from './slot/liveness.js';
import type { Logger } from '../log.js';
import type { Prices } from './metering/pricing.js';
import { createLocalUpstream } from './upstream/local.js';
import { createOpenAICompatibleUpstream } from './upstream/openai-compatible.js';
import type { Upstream } from './upstream/types.js';

// The model domain's long-lived parts, built once by createDeps (STYLE: one composition root; nothing
// connects at import time). `upstream` is the configured provider or the built-in svc-local model.

export interface ModelServices {
  /** The forced model id (CONTRACT §9, MODEL_ID; `svc-local` without an upstream). */
  modelId: string;
  prices: Prices;
  /** The most a non-text content part can cost, per kind (MODEL_PART_TOKENS_*; unset: refused). */
  partTokens: PartTokens;
  upstream: Upstream;
  limiter: ConcurrencyLimiter;
  agents: AgentCatalog;
  outcome: OutcomeSigner;
  runMaxSteps: number;
  /** Every call's hold and settle, grouped with the calls in flight beside it (see createSpendBatchers). */
  spend: SpendBatchers;
  /** This process's tag and heartbeat: a dead peer's leases and holds are reclaimed (liveness.ts). */
  liveness: Liveness;
  /** Settles and voids the database did not take when their call ended, retried until they land. */
  settles: PendingSettles;
  /** Holds taken ahead for each org's next call (spare-holds.ts). */
  spares: SpareHolds;
  /**
   * The org of each `svc_` token hash this process has admitted (a token's org never changes): tells the
   * one-statement admission when the org has a spare hold waiting (chat-admission.ts). A hint only: the
   * call's live read decides.
   */
  tokenOrgs: Map<string, string>;
  /** The `user` sent upstream for an acting user: svc's own opaque id (upstream-user.ts). */
  upstreamUserId(userId: string): string;
  close(): Promise<void>;
}

/** At shutdown, settles still waiting for the database are retried this long before they are spooled. */
export const SETTLE_FLUSH_MS = 5_000;

export interface SpendBatchers {
  reserve(input: ReserveInput): Promise<{ heldCredits: number }>;
  /** An `svc_` token's live read and its call's hold together (src/models/admission/admit.ts). */
  admit(input: AdmitInput): Promise<AdmitRow>;
  settle(input: SettleInput): Promise<SettleResult>;
}

/**
 * Reserve and settle through group commit (src/db/batch.ts): the holds and settles that arrive while one
 * batch runs go together in the next, one statement and one commit for all of them. One batch of each runs
 * at a time: a batch serves every org in it, and fewer, larger batches measured faster than two in flight
 * (1,608 against 1,489 chat calls/s, docs/models.md). A statement refusing one input fails only that call.
 */
export function createSpendBatchers(db: Db): SpendBatchers {
  const options = { maxInFlight: 1, isolateFailures: true };
  // Each a span when traced (CONTRACT §1: the hold and the settle; docs/operations.md, Traces).
  return {
    reserve: spanned(
      'svc.hold',
      createBatcher<ReserveInput, { heldCredits: number }>((inputs) => reserveMany(db, inputs), options),
      {
        before: (i) => ({ 'svc.request_id': i.requestId, 'svc.org_id': orgIdOf(i.orgKey) }),
        after: (o) => ({ 'svc.credits_held': o.heldCredits }),
      },
    ),
    admit: spanned(
      'svc.hold',
      createBatcher<AdmitInput, AdmitRow>((inputs) => admitMany(db, inputs), options),
      {
        // The token's live read and the hold in one statement (admit.ts).
        before: (i) => ({ 'svc.request_id': i.requestId, 'svc.hold.with_token_read': true }),
        after: (o) => ({ 'svc.hold.outcome': o.outcome, 'svc.credits_held': o.heldCredits }),
      },
    ),
    settle: spanned(
      'svc.settle',
      createBatcher<SettleInput, SettleResult>((inputs) => settleMany(db, inputs), options),
      {
        before: (i) => ({ 'svc.request_id': i.requestId }),
        after: (o) => ({ 'svc.credits_debited': o.debitedCredits }),
      },
    ),
  };
}

export function createModelServices(
  config: Config,
  db: Db,
  signingKeys: SigningKeys,
  log: Logger,
  hmacKey: Buffer | string,
  options: { fence?: boolean } = {},
): ModelServices {
  const upstream = config.model.upstreamUrl
    ? createOpenAICompatibleUpstream({
        url: config.model.upstreamUrl,
        key: config.model.upstreamKey,
        api: config.model.upstreamApi,
        // MODEL_UPSTREAM_*_TIMEOUT_MS (docs/operations.md): a provider that sends nothing holds a slot that long.
        timeouts: config.upstreamTimeouts,
      })
    : createLocalUpstream(config.model.id);
  const liveness = createLiveness(db, {
    deadAfterMs: config.reliability.processDeadAfterMs,
    log,
    // Self-fencing (liveness.ts): calls in flight end before a peer may count their slots free.
    ...(options.fence ? { onRevoke: () => limiter.revoke() } : {}),
  });
  const newLeaseId = () => liveness.leaseId();
  const limiter = config.redisUrl
    ? createRedisLimiter(config.redisUrl, {
        cap: config.orgMaxConcurrency,
        newLeaseId,
        // A dead process's Redis leases are dropped by the next acquire that needs them (concurrency-redis.ts).
        process: { tag: liveness.tag, deadAfterMs: config.reliability.processDeadAfterMs },
      })
    : createPgLimiter(db, { cap: config.orgMaxConcurrency, newLeaseId });
  const spend = createSpendBatchers(db);
  const services: ModelServices = {
    modelId: config.model.id,
    prices: {
      input: config.model.priceInput,
      output: config.model.priceOutput,
      cachedInput: config.model.priceCachedInput,
    },
    partTokens: config.model.partTokens,
    upstream,
    limiter,
    agents: loadAgentCatalog(config.agentsFile),
    outcome: createOutcomeSigner(signingKeys),
    runMaxSteps: config.runMaxSteps,
    spend,
    liveness,
    settles: createPendingSettles({
      // A kept settle bills the call whole, the excess beyond its hold included (debt.ts).
      settle: (input) => settleWithExcess(db, log, input),
      voidHold: (requestId) => voidHold(db, requestId),
      log,
      spoolFile: config.reliability.settleSpoolFile,
    }),
    spares: createSpareHolds({
      newRequestId: () => liveness.requestId(),
      // Without waiting for the flush (a spare is temporary state: spend.ts voidHolds). A give-back the
      // database did not take is kept and retried like a failed call's void (pending-settles.ts).
      giveBack: (requestIds) =>
        voidHolds(db, requestIds, { flush: false }).catch(() => {
          for (const requestId of requestIds) services.settles.keep({ kind: 'void', requestId });
        }),
    }),
    tokenOrgs: new Map(),
    upstreamUserId: createUpstreamUserIds(hmacKey),
    async close() {
      await services.spares.close();
      await services.limiter.close();
      await services.upstream.close();
      // Last: settles still waiting get a few more seconds, then go to the spool (docs/operations.md).
      await services.settles.flush(Date.now() + SETTLE_FLUSH_MS);
      await services.liveness.close();
    },
  };
  return services;
}
