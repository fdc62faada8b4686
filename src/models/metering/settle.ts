import type { Deps } from '../../deps.js';
import { AppError } from '../../http/errors.js';
import { chargeExcess } from '../../billing/debt.js';
import {
  orgBalanceCredits,
  voidHold,
  type SettleInput,
  type SettleResult,
  type UsageRecordInput,
} from '../../billing/spend.js';
import type { Actor } from '../admission/actor.js';
import type { PreparedCall } from './metered.js';
import { cachedPromptTokens, creditsFor } from './pricing.js';
import type { Usage } from '../upstream/types.js';
import { recordModelCall } from '../../metrics/models.js';
import { modelCallSettled, modelCallSettleKept, modelCallVoided } from '../../telemetry/model-call.js';

// Settle (CONTRACT §8): after a call, debit its real cost (one `usage` transaction), never more than its
// hold, or nothing when the provider failed (void). The hold was taken by metered.ts.

export interface CallOutcome {
  requestId: string;
  usage: Usage;
  creditsDebited: number;
  balanceCredits: number;
}

/** How a settled call ended, and where it ran, for its usage record (src/db/tables/usage.ts). */
export interface SettleNote {
  /** Words for the ledger row's description. */
  note?: string;
  /** completed (the provider's usage), estimated (our count: the usage never came), aborted (cut short). */
  outcome?: UsageRecordInput['outcome'];
  runId?: string;
}

/** `built`: told the settle's input (without the next hold) before it is sent, for settleOrKeep. */
export async function settleCall(
  deps: Deps,
  call: PreparedCall,
  usage: Usage,
  how: SettleNote = {},
  built?: (input: SettleInput) => void,
): Promise<CallOutcome> {
  const { note = '', outcome = 'completed', runId } = how;
  const { spares, spend, prices, modelId } = deps.models;
  // The rate-limit windows counted the hold's most; they keep what the call really used (CONTRACT §11).
  call.rate?.settle(usage.prompt_tokens + usage.completion_tokens);
  // Cached prompt tokens at their own price, clamped to what the prompt can hold.
  const cached = cachedPromptTokens(usage);
  const actual = creditsFor(prices, usage.prompt_tokens, usage.completion_tokens, cached);
  const tokens = `${usage.prompt_tokens} in${cached ? ` (${cached} cached)` : ''}, ${usage.completion_tokens} out`;
  const input: SettleInput = {
    requestId: call.requestId,
    actualCredits: actual,
    description: `${modelId}: ${tokens}${note ? ` (${note})` : ''} [${call.requestId}]`,
    usage: usageRecord(deps, call, usage, { outcome, runId, cached }),
  };
  built?.(input);
  // The org's next call here will likely look like this one: its hold is taken by this settle, off its path.
  const next = spares.ahead(call.actor.orgKey, call.maxCredits);
  let settled: SettleResult;
  try {
    settled = await spend.settle({ ...input, ...(next ? { next } : {}) });
  } catch (err) {
    if (next) spares.landed(next, null);
    throw err;
  }
  if (next) spares.landed(next, settled.nextHeldCredits ?? 0);
  // The provider reported more than the hold covered (a part over its configured bound, a provider's own
  // mistake): the excess is debited up to the balance and the rest is the owner's debt, never lost.
  if (actual > settled.debitedCredits) {
    // The hold just taken ahead for the org's next call is svc's own: given back first, so the excess is
    // paid from the whole balance.
    if (next) await spares.release(call.actor.orgKey);
    const excess = await chargeExcess(deps.db, deps.log, {
      requestId: call.requestId,
      actualCredits: actual,
      description: `${modelId}: ${tokens} [${call.requestId}]`,
    });
    settled = {
      ...settled,
      debitedCredits: settled.debitedCredits + excess.debited,
      balanceCredits: settled.balanceCredits - excess.debited,
    };
  }
  recordModelCall(outcome, performance.now() - call.startedAt, settled.debitedCredits);
  // The call's span (src/telemetry/model-call.ts) ends with what the ledger debited.
  modelCallSettled(call, {
    inputTokens: usage.prompt_tokens,
    outputTokens: usage.completion_tokens,
    creditsDebited: settled.debitedCredits,
  });
  return {
    requestId: call.requestId,
    usage,
    creditsDebited: settled.debitedCredits,
    balanceCredits: settled.balanceCredits,
  };
}

function usageRecord(
  deps: Deps,
  call: PreparedCall,
  usage: Usage,
  how: { outcome: UsageRecordInput['outcome']; runId: string | undefined; cached: number },
): UsageRecordInput {
  const { actor } = call;
  const { prices, modelId } = deps.models;
  return {
    org: actor.orgKey,
    user: actor.userId,
    api_token_id: actor.credential.apiTokenId === null ? null : Number(actor.credential.apiTokenId),
    oauth_grant_id: actor.credential.grantId,
    oauth_client_id: actor.credential.oauthClientId,
    source: how.runId ? 'run' : 'chat',
    run_id: how.runId ?? null,
    model: modelId,
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    cached_prompt_tokens: how.cached,
    price_input: prices.input,
    price_output: prices.output,
    price_cached_input: prices.cachedInput,
    duration_ms: Math.max(0, Math.round(performance.now() - call.startedAt)),
    outcome: how.outcome,
  };
}

/**
 * settleCall for a call whose output was delivered: when the database does not answer, the settle is kept
 * and retried until it lands (src/models/metering/pending-settles.ts) and the answer is null, the
 * outcome not known yet. An AppError (the database answered and refused) is thrown as before.
 */
export async function settleOrKeep(
  deps: Deps,
  call: PreparedCall,
  usage: Usage,
  how: SettleNote = {},
): Promise<CallOutcome | null> {
  let input: SettleInput | undefined;
  try {
    return await settleCall(deps, call, usage, how, (built) => (input = built));
  } catch (err) {
    if (err instanceof AppError || !input) {
      modelCallVoided(call, err);
      throw err;
    }
    deps.log.warn({ err, requestId: call.requestId }, 'settle not written; kept and retried');
    deps.models.settles.keep({ kind: 'settle', input });
    modelCallSettleKept(call, { inputTokens: usage.prompt_tokens, outputTokens: usage.completion_tokens });
    return null;
  }
}

/**
 * A failed call debits nothing (CONTRACT §8). Never throws: the caller is already reporting an error. A
 * void the database did not take is kept and retried, so the hold's tokens come back once it answers.
 */
export async function voidCall(deps: Deps, call: PreparedCall): Promise<void> {
  recordModelCall('failed', performance.now() - call.startedAt, 0);
  modelCallVoided(call);
  call.rate?.settle(0);
  await voidHold(deps.db, call.requestId).catch((err: unknown) => {
    deps.log.warn({ err, requestId: call.requestId }, 'void not written; kept and retried');
    deps.models.settles.keep({ kind: 'void', requestId: call.requestId });
  });
}

export async function balanceOf(deps: Deps, orgKey: string): Promise<number> {
  return orgBalanceCredits(deps.db, orgKey);
}

/** The call's signed outcome (CONTRACT §9: `x-svc-outcome`). */
export async function signOutcome(
  deps: Deps,
  actor: Actor,
  o: { requestId: string; creditsDebited: number; balanceCredits: number },
) {
  return deps.models.outcome.sign({ userId: actor.userId, orgKey: actor.orgKey, ...o });
}
