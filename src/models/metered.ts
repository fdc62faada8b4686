import type { Deps } from '../deps.js';
import { AppError } from '../http/errors.js';
import { chargeExcess } from '../billing/debt.js';
import {
  orgBalanceCredits,
  voidHold,
  type SettleInput,
  type SettleResult,
  type UsageRecordInput,
} from '../billing/spend.js';
import type { Actor } from './actor.js';
import type { SpareHold } from './spare-holds.js';
import { affordableOutput, cachedPromptTokens, creditsFor, DEFAULT_MAX_OUTPUT_TOKENS } from './pricing.js';
import type { ChatRequest } from './schema.js';
import { countPrompt, countText, promptUpperBound, type PartTokens } from './tokens.js';
import type { ChatBody, ChatChunk, ChatCompletion, ToolCall, Usage } from './upstream/types.js';
import { recordModelCall } from '../metrics/models.js';

// Reserve, then settle (CONTRACT §8). Before a call: hold the most it can cost and cap its max tokens to
// what the hold pays; after: debit the real cost (one `usage` transaction), or nothing when the provider
// failed. A balance never goes below zero because the upstream is never allowed to write more than the
// hold pays for, and settle never debits more than the hold.

export interface PreparedCall {
  requestId: string;
  actor: Actor;
  /** What goes upstream: the model forced, the limit capped, usage requested on streams. */
  body: ChatBody;
  heldCredits: number;
  /** The most the call could cost (its plan): what the hold taken ahead for the org's next call is sized from. */
  maxCredits: number;
  /** The client asked for the usage chunk itself (else it is stripped from the stream). */
  clientWantsUsage: boolean;
  /**
   * Our deterministic count of the prompt, used only when the provider's usage never arrived. Counted on
   * first use: a regex pass over the whole prompt (0.65 ms per 100 KB) has no place before the first byte.
   */
  promptEstimate: () => number;
  /** When its hold was in place (performance.now()): the usage record's duration runs from here. */
  startedAt: number;
}

export interface CallOutcome {
  requestId: string;
  usage: Usage;
  creditsDebited: number;
  balanceCredits: number;
}

const insufficient = (message: string) =>
  new AppError(402, 'insufficient_credits', message, { headers: { 'x-should-retry': 'false' } });

/** What a call may cost, worked out from its request before anything is held. */
export interface HoldPlan {
  requestId: string;
  /** Even a minimal call (one token per choice) must be payable, and a zero balance never is (billing rule 5). */
  minCredits: number;
  /** The most the call can cost: its prompt bound plus the output it asked for. */
  maxCredits: number;
  shape: CostShape;
}

interface CostShape {
  n: number;
  limitField: 'max_completion_tokens' | 'max_tokens';
  wantedPerChoice: number;
  promptBound: number;
}

function costShape(request: ChatRequest | ChatBody, parts: PartTokens): CostShape {
  const n = Number(request.n ?? 1);
  const limitField = request.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens';
  return {
    n,
    limitField,
    wantedPerChoice: Number(request[limitField] ?? DEFAULT_MAX_OUTPUT_TOKENS),
    promptBound: promptUpperBound(request.messages, request.tools, parts),
  };
}

export function planHold(deps: Deps, request: ChatRequest | ChatBody): HoldPlan {
  const { prices } = deps.models;
  const shape = costShape(request, deps.models.partTokens);
  const { n, wantedPerChoice, promptBound } = shape;
  const minCredits = Math.max(1, creditsFor(prices, promptBound, n));
  return {
    requestId: deps.models.liveness.requestId(),
    minCredits,
    maxCredits: Math.max(minCredits, creditsFor(prices, promptBound, wantedPerChoice * n)),
    shape,
  };
}

export const cannotPay = () => insufficient("the organization's allocation cannot pay for this call");

/**
 * The call's hold: the one taken ahead for the actor's org when it covers the call (spare-holds.ts;
 * adopted whole, its request id becomes the call's), else a hold of its own. `claimed`: a spare of the
 * actor's org this call already claimed (chat-admission.ts); without it, the call claims one here.
 */
export async function prepareCall(
  deps: Deps,
  actor: Actor,
  request: ChatRequest | ChatBody,
  stream: boolean,
  claimed?: Promise<SpareHold | null>,
): Promise<PreparedCall> {
  const plan = planHold(deps, request);
  const { spares } = deps.models;
  const spare = spares.fit(actor.orgKey, await (claimed ?? spares.claim(actor.orgKey)), plan.maxCredits);
  if (spare)
    return heldCall(deps, actor, request, stream, { ...plan, requestId: spare.requestId }, spare.amount);
  const reserve = () =>
    // Grouped with the other calls in flight (ModelServices.spend). Holds commit without waiting for the
    // WAL flush: only a call in flight across a database crash can lose its hold; its settle then fails
    // loudly and that call is not billed.
    deps.models.spend.reserve({
      orgKey: actor.orgKey,
      userId: actor.userId,
      apiTokenId: actor.credential.apiTokenId,
      requestId: plan.requestId,
      minCredits: plan.minCredits,
      maxCredits: plan.maxCredits,
    });
  let heldCredits: number;
  try {
    ({ heldCredits } = await reserve().catch(async (err: unknown) => {
      // A spare of ours too small for this call may hold the very tokens it needs: give it back, once.
      if (
        err instanceof AppError &&
        err.code === 'insufficient_credits' &&
        (await spares.release(actor.orgKey))
      )
        return reserve();
      throw err;
    }));
  } catch (err) {
    // A member's budget (member_budget_exhausted) answers as the hold said; the allocation in our words.
    if (err instanceof AppError && err.code === 'insufficient_credits') throw cannotPay();
    if (!(err instanceof AppError)) voidIfWritten(deps, plan.requestId);
    throw err;
  }
  return heldCall(deps, actor, request, stream, plan, heldCredits);
}

/**
 * The call as it goes upstream, once `heldCredits` are held for it: its output capped to what the hold
 * pays (CONTRACT §8: a balance never goes negative, streaming included), the model forced, usage asked
 * for on streams. A hold too small for one token per choice is voided: 402.
 */
export async function heldCall(
  deps: Deps,
  actor: Actor,
  request: ChatRequest | ChatBody,
  stream: boolean,
  plan: HoldPlan,
  heldCredits: number,
): Promise<PreparedCall> {
  const { prices, modelId } = deps.models;
  const { requestId } = plan;
  const { n, limitField, wantedPerChoice, promptBound } = plan.shape;
  const perChoice = Math.floor(affordableOutput(prices, promptBound, heldCredits, wantedPerChoice * n) / n);
  if (perChoice < 1) {
    await voidHold(deps.db, requestId);
    throw cannotPay();
  }
  const body: ChatBody = {
    ...(request as ChatBody),
    model: modelId,
    [limitField]: perChoice,
    user: deps.models.upstreamUserId(actor.userId),
  };
  delete body.safety_identifier;
  if (limitField === 'max_completion_tokens') delete body.max_tokens;
  const clientWantsUsage = !!(request.stream_options as { include_usage?: boolean } | null | undefined)
    ?.include_usage;
  if (stream) {
    body.stream = true;
    body.stream_options = { ...(request.stream_options ?? {}), include_usage: true };
  } else {
    delete body.stream;
    delete body.stream_options;
  }
  let counted: number | undefined;
  const promptEstimate = () => (counted ??= countPrompt(request.messages, request.tools));
  return {
    requestId,
    actor,
    body,
    heldCredits,
    maxCredits: plan.maxCredits,
    clientWantsUsage,
    promptEstimate,
    startedAt: performance.now(),
  };
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
  // Cached prompt tokens at their own price (issue 19 item 4), clamped to what the prompt can hold.
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
 * and retried until it lands (src/models/pending-settles.ts; issue 14, item 3) and the answer is null, the
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
    if (err instanceof AppError || !input) throw err;
    deps.log.warn({ err, requestId: call.requestId }, 'settle not written; kept and retried');
    deps.models.settles.keep({ kind: 'settle', input });
    return null;
  }
}

/**
 * A failed call debits nothing (CONTRACT §8). Never throws: the caller is already reporting an error. A
 * void the database did not take is kept and retried, so the hold's tokens come back once it answers.
 */
export async function voidCall(deps: Deps, call: PreparedCall): Promise<void> {
  recordModelCall('failed', performance.now() - call.startedAt, 0);
  await voidHold(deps.db, call.requestId).catch((err: unknown) => {
    deps.log.warn({ err, requestId: call.requestId }, 'void not written; kept and retried');
    deps.models.settles.keep({ kind: 'void', requestId: call.requestId });
  });
}

/**
 * A hold statement that failed without the database's answer (a connection cut, a timeout) may still
 * have committed: its void is kept and retried like a failed call's (pending-settles.ts), so such a hold
 * goes back once the database answers instead of waiting out its 15 minutes. Voiding a hold that was
 * never written does nothing.
 */
export function voidIfWritten(deps: Deps, requestId: string): void {
  deps.models.settles.keep({ kind: 'void', requestId });
}

export async function balanceOf(deps: Deps, orgKey: string): Promise<number> {
  return orgBalanceCredits(deps.db, orgKey);
}

/** Usage from svc's own counts, for a call whose provider never reported it. */
export const countedUsage = (prompt: number, completion: number): Usage => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  total_tokens: prompt + completion,
});

/** A JSON reply's output as the stream meter counts it: each content and each tool call's arguments. */
export function completionTokensOf(completion: ChatCompletion): number {
  let n = 0;
  for (const choice of completion.choices ?? []) {
    const content = choice.message?.content;
    if (typeof content === 'string' && content) n += Math.max(1, countText(content));
    for (const tc of choice.message?.tool_calls ?? [])
      n += Math.max(1, countText(tc.function?.arguments ?? ''));
  }
  return n;
}

/**
 * Watches a stream: keeps the provider's usage, counts what was generated (for a stream the client left
 * before the usage chunk), forces the model id, and assembles the assistant message (for runs).
 */
export class StreamMeter {
  usage: Usage | null = null;
  generated = 0;
  content = '';
  finishReason: string | null = null;
  private calls: { id: string; name: string; arguments: string }[] = [];

  constructor(private readonly modelId: string) {}

  /** Returns the chunk to forward (model forced), or null when it is the usage chunk the client did not ask for. */
  observe(chunk: ChatChunk, forwardUsage: boolean): ChatChunk | null {
    if (chunk.usage) this.usage = chunk.usage;
    for (const choice of chunk.choices ?? []) {
      const d = choice.delta ?? {};
      if (typeof d.content === 'string' && d.content) {
        this.generated += Math.max(1, countText(d.content));
        if (choice.index === 0) this.content += d.content;
      }
      for (const tc of d.tool_calls ?? []) {
        const args = tc.function?.arguments ?? '';
        if (args || tc.function?.name) this.generated += Math.max(1, countText(args));
        if (choice.index !== 0) continue;
        const slot = (this.calls[tc.index] ??= { id: '', name: '', arguments: '' });
        if (tc.id) slot.id = tc.id;
        if (tc.function?.name) slot.name += tc.function.name;
        slot.arguments += args;
      }
      if (choice.finish_reason && choice.index === 0) this.finishReason = choice.finish_reason;
    }
    chunk.model = this.modelId;
    if (!forwardUsage) {
      if (chunk.usage && (!chunk.choices || chunk.choices.length === 0)) return null;
      delete chunk.usage;
    }
    return chunk;
  }

  toolCalls(): ToolCall[] {
    // Some providers omit ids on streamed calls: a run needs one to match the client's tool_result.
    return this.calls
      .map(
        (c, i) =>
          c && {
            id: c.id || `call_${i}_${this.content.length}`,
            type: 'function' as const,
            function: { name: c.name, arguments: c.arguments },
          },
      )
      .filter((c): c is ToolCall => !!c);
  }

  /** The provider's usage, or our count of what streamed when it never came. */
  finalUsage(promptEstimate: () => number): { usage: Usage; estimated: boolean } {
    if (this.usage) return { usage: this.usage, estimated: false };
    return { usage: countedUsage(promptEstimate(), this.generated), estimated: true };
  }
}
