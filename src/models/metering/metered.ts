import type { Deps } from '../../deps.js';
import { AppError, errorOf } from '../../http/errors.js';
import { BILLING_ERRORS } from '../../billing/errors.js';
import { voidHold } from '../../billing/spend.js';
import type { Actor } from '../admission/actor.js';
import type { SpareHold } from '../admission/spare-holds.js';
import { affordableOutput, creditsFor, DEFAULT_MAX_OUTPUT_TOKENS } from './pricing.js';
import type { ChatRequest } from '../schema.js';
import { promptTokenCount, promptUpperBound, type PartTokens } from './tokens.js';
import type { ChatBody } from '../upstream/types.js';
import { markSpan } from '../../telemetry/spans.js';
import type { RateAdmission } from '../../ratelimit/model-limits.js';

// Reserve (CONTRACT §8): before a call, hold the most it can cost and cap its max tokens to what the hold
// pays. A balance never goes below zero because the upstream is never allowed to write more than the
// hold pays for, and the settle (settle.ts) never debits more than the hold.

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
   * The prompt counted with the tokenizer (tokens.ts), used only when the provider's usage never arrived
   * (CONTRACT §9). Counted on first use, never before the first byte; at most the prompt's bound.
   */
  promptTokens: () => Promise<number>;
  /** The most output the provider may write: the capped limit times the choices (a count never exceeds it). */
  outputCap: number;
  /** When its hold was in place (performance.now()): the usage record's duration runs from here. */
  startedAt: number;
  /** Its count in the rate-limit windows (CONTRACT §11), or null when no limit applies. */
  rate: RateAdmission | null;
}

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
    promptBound: promptUpperBound(request, parts),
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

/** 402 insufficient_credits naming `needed_credits`: the least the call needed held (its prompt at least). */
export const cannotPay = (neededCredits: number) =>
  errorOf(BILLING_ERRORS, 'insufficient_credits', "the organization's allocation cannot pay for this call", {
    headers: { 'x-should-retry': 'false' },
    fields: { needed_credits: Math.ceil(neededCredits) },
  });

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
  if (spare) {
    // Its hold span says the hold was taken ahead, by the org's previous settle (CONTRACT §1).
    const held = { 'svc.request_id': spare.requestId, 'svc.credits_held': spare.amount };
    markSpan('svc.hold', { ...held, 'svc.hold.taken_ahead': true });
    return heldCall(deps, actor, request, stream, { ...plan, requestId: spare.requestId }, spare.amount);
  }
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
    if (err instanceof AppError && err.code === 'insufficient_credits') throw cannotPay(plan.minCredits);
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
    throw cannotPay(plan.minCredits);
  }
  // RPM and TPM (CONTRACT §11): counted against the most this hold lets the call use; a refusal gives the
  // hold back. Without a limit this is a map lookup (src/ratelimit/model-limits.ts).
  let rate: RateAdmission | null;
  try {
    rate = await deps.limits.modelRates.admit(
      actor.orgKey,
      actor.credential.apiTokenId,
      promptBound + perChoice * n,
    );
  } catch (err) {
    await voidHold(deps.db, requestId).catch(() => voidIfWritten(deps, requestId));
    throw err;
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
  let counted: Promise<number> | undefined;
  const promptTokens = () =>
    (counted ??= promptTokenCount(body, deps.models.partTokens).then((t) => Math.min(t, promptBound)));
  return {
    requestId,
    actor,
    body,
    heldCredits,
    maxCredits: plan.maxCredits,
    clientWantsUsage,
    promptTokens,
    outputCap: perChoice * n,
    startedAt: performance.now(),
    rate,
  };
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
