import type { Deps } from '../../deps.js';
import { invalidToken, membershipUnavailable, errorOf, COMMON_ERRORS } from '../../http/errors.js';
import {
  apiTokenCredential,
  assertCanSpend,
  assertModelScope,
  assertTokenHolderActive,
  type Actor,
} from './actor.js';
import type { AdmitRow } from './admit.js';
import { putBackClaimed, type Admission, type ModelHttpRequest, type SpareStart } from './admission.js';
import {
  cannotPay,
  heldCall,
  planHold,
  prepareCall,
  voidIfWritten,
  type PreparedCall,
} from '../metering/metered.js';
import { memberBudgetExhausted, voidHold } from '../../billing/spend.js';
import { noteBudgetExhausted } from '../../billing/budgets.js';
import { chatRequest, parseChatRequest, type ChatRequest } from '../schema.js';
import type { Lease } from '../slot/concurrency.js';

// The short way in for POST /v1/chat/completions: when the caller is an `svc_` token and nothing else
// names who acts (no x-svc-organisation header, no org_id), the token's live read and the call's hold go
// in one statement (admit.ts) instead of an auth round trip and then a hold round trip: one round trip
// fewer before the first byte, and one statement fewer per batch under load. It answers exactly as the
// general way (actorOf, then prepareCall) would: the same row, the same checks in the same order
// (Authentication 4–8, CONTRACT §7, §9). Anything else (a model grant, a header, org_id, a body that does
// not parse, so that a bad credential still answers 401 before a bad body's 400) returns null and takes
// the general way. A token whose org has a hold taken ahead here (spare-holds.ts) needs only the read,
// started as the request arrives (startAdmission).

export interface AdmittedChat {
  actor: Actor;
  request: ChatRequest;
  lease: Lease;
  call: PreparedCall;
}

/**
 * How a front-end (chat completions, Responses, Messages) turns its request body into the internal
 * request, a chat completions request (src/models/call.ts).
 */
export interface Intake {
  /** Without the caller: the request when the body translates alone and is valid, else null. */
  quick(body: unknown): ChatRequest | null;
  /** With the caller (a stored response of its org, say): the request, or the 400 for a bad body. */
  full(body: unknown, actor: Actor): ChatRequest | Promise<ChatRequest>;
}

/** The chat completions front-end's intake: the body is the internal request, allow-listed (schema.ts). */
export const chatIntake: Intake = {
  quick(body) {
    const parsed = chatRequest.safeParse(body);
    return parsed.success ? parsed.data : null;
  },
  full: (body) => parseChatRequest(body),
};

/** The one-statement admission (or a claimed spare's), else null: the caller then takes the general way. */
export async function admitChat(
  deps: Deps,
  admission: Admission,
  req: ModelHttpRequest,
  intake: Intake,
): Promise<AdmittedChat | null> {
  if (admission.spare) {
    admission.spare.used = true;
    return withSpare(deps, admission, req, admission.spare, intake);
  }
  const { tokenHash } = admission;
  if (tokenHash === null) return null;
  const knownOrg = deps.models.tokenOrgs.get(tokenHash);
  // The slot before the hold (src/models/slot/lease.ts); a round trip before the first byte only when this
  // process has no idle slot of the org (src/models/slot/concurrency.ts, slot reuse). An org not known yet
  // takes the general way, whose caller read comes first (admission.ts remembers the org, so this
  // is rare).
  if (knownOrg === undefined) return null;
  const request = intake.quick(req.body);
  if (!request) return null;
  const lease = await admission.lease(knownOrg);
  try {
    const admitted = await admitWithLease(deps, tokenHash, knownOrg, request);
    return admitted && { ...admitted, lease };
  } catch (err) {
    await lease.release();
    throw err;
  }
}

/** The one-statement admission, once the call's slot in `knownOrg` is held. */
async function admitWithLease(
  deps: Deps,
  tokenHash: string,
  knownOrg: string,
  request: ChatRequest,
): Promise<Omit<AdmittedChat, 'lease'> | null> {
  const { spares } = deps.models;
  const plan = planHold(deps, request);
  let admission: AdmitRow;
  try {
    admission = await deps.models.spend.admit({
      tokenHash,
      requestId: plan.requestId,
      minCredits: plan.minCredits,
      maxCredits: plan.maxCredits,
    });
  } catch {
    // Fail closed (Authentication 5): no membership read, no call. The statement may have committed its
    // hold all the same (the answer lost): voided once the database answers.
    voidIfWritten(deps, plan.requestId);
    throw membershipUnavailable();
  }
  // The token's last use was stamped by the admission statement itself (token-admission.sql).
  let actor: Actor;
  try {
    actor = actorOf(admission);
    // A token's org never changes; were the hint wrong, the slot held is not this call's.
    if (actor.orgKey !== knownOrg) throw membershipUnavailable();
  } catch (err) {
    // Never expected with a hold (the statement holds only for callers who pass these checks), but a
    // hold must not outlive a refused call.
    if (admission.outcome === 'held') await voidHold(deps.db, plan.requestId).catch(() => {});
    throw err;
  }
  if (admission.outcome === 'insufficient') {
    // A spare of ours for this org may hold the very tokens this call needs: given back, the general
    // way holds again.
    if (await spares.release(admission.orgKey!)) return null;
    throw cannotPay(plan.minCredits);
  }
  if (admission.outcome === 'budget_exhausted') {
    // The period's first refusal is told to the owner's endpoints (off the call's path).
    void noteBudgetExhausted(deps.db, {
      orgKey: actor.orgKey,
      userId: actor.userId,
      apiTokenId: actor.credential.apiTokenId,
      least: Math.ceil(plan.minCredits),
    }).catch(() => {}); // the next refusal tries again
    throw memberBudgetExhausted();
  }
  if (admission.outcome !== 'held') {
    // Nothing was held: a caller the statement refused that the checks above let through would be a bug
    // in one of the two; refuse rather than run an unbilled call.
    throw errorOf(COMMON_ERRORS, 'NOT_A_MEMBER');
  }
  return {
    actor,
    request,
    call: await heldCall(deps, actor, request, !!request.stream, plan, admission.heldCredits),
  };
}

/** The caller, or the error the account auth gives for the same row (src/models/admission/actor.ts actorFromToken). */
function actorOf(a: AdmitRow): Actor {
  if (a.outcome === 'no_token') throw invalidToken();
  if (a.outcome === 'insufficient_scope') assertModelScope([]);
  const role = assertTokenHolderActive({
    role: a.orgDeleted ? null : a.role,
    emailVerified: a.emailVerified,
  });
  assertCanSpend(role);
  return {
    userId: a.userId!,
    orgKey: a.orgKey!,
    role,
    via: 'api_token',
    credential: apiTokenCredential(a.tokenId!),
  };
}

/**
 * The token's org has a hold taken ahead here, claimed for this call (startAdmission): the live read
 * the general way makes (batched and prepared; no write), then prepareCall with the claimed spare: the
 * call's hold when it covers the call, else back on the shelf and the call holds its own.
 */
async function withSpare(
  deps: Deps,
  admission: Admission,
  req: ModelHttpRequest,
  start: SpareStart,
  intake: Intake,
): Promise<AdmittedChat> {
  let actor: Actor;
  let request: ChatRequest;
  let lease: Lease;
  try {
    actor = await start.actor;
    request = await intake.full(req.body, actor);
    // Started as the request arrived (startAdmission); a 429 puts the spare back, nothing written.
    lease = await admission.lease(actor.orgKey);
  } catch (err) {
    putBackClaimed(deps, start);
    throw err;
  }
  // A token's org never changes, so the claimed spare is the actor's org's; were it not, it goes back.
  const sameOrg = actor.orgKey === start.orgKey;
  if (!sameOrg) putBackClaimed(deps, start);
  try {
    const call = await prepareCall(
      deps,
      actor,
      request,
      !!request.stream,
      sameOrg ? start.claimed : undefined,
    );
    return { actor, request, lease, call };
  } catch (err) {
    await lease.release();
    throw err;
  }
}
