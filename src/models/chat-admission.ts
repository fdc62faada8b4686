import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { API_TOKEN_PATTERN } from '../auth/api-token-secret.js';
import { hmacSecret } from '../crypto/hash.js';
import { AppError, invalidToken, membershipUnavailable } from '../http/errors.js';
import { bearerOf } from '../http/bearer.js';
import {
  apiTokenCredential,
  assertCanSpend,
  assertModelScope,
  assertTokenHolderActive,
  ORG_HEADER,
  tokenHolderActor,
  type Actor,
} from './actor.js';
import type { Admission } from './admit.js';
import { cannotPay, heldCall, planHold, prepareCall, voidIfWritten, type PreparedCall } from './metered.js';
import type { SpareHold } from './spare-holds.js';
import { memberBudgetExhausted, voidHold } from '../billing/spend.js';
import { noteBudgetExhausted } from '../billing/budgets.js';
import { chatRequest, parseChatRequest, type ChatRequest } from './schema.js';
import type { Lease } from './concurrency.js';
import { chatLease } from './lease.js';

// The short way in for POST /v1/chat/completions: when the caller is an `svc_` token and nothing else
// names who acts (no x-svc-organisation header, no org_id), the token's live read and the call's hold go
// in one statement (admit.ts) instead of an auth round trip and then a hold round trip: one round trip
// fewer before the first byte, and one statement fewer per batch under load. It answers exactly as the
// general way (actorOf, then prepareCall) would: the same row, the same checks in the same order
// (Authentication 4–8, CONTRACT §7, §9). Anything else (a model grant, a header, org_id, a body that does
// not parse, so that a bad credential still answers 401 before a bad body's 400) returns null and takes
// the general way. A token whose org has a hold taken ahead here (spare-holds.ts) needs only the read,
// started as the request arrives (startSpareAdmission).

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

/** A request as these steps read it: Express's, or a plain one on the chat call's own entry (no query). */
export type ChatHttpRequest = IncomingMessage & { body?: unknown; query?: Record<string, unknown> };

/** The bearer when the caller is an `svc_` token and nothing else names who acts, else null. */
function svcTokenOf(req: ChatHttpRequest): string | null {
  if (req.headers[ORG_HEADER] !== undefined || req.query?.org_id !== undefined) return null;
  const token = bearerOf(req.headers.authorization);
  return token && API_TOKEN_PATTERN.test(token) ? token : null;
}

/** The HMAC of the bearer when the caller is an `svc_` token and nothing else names who acts, else null. */
function svcTokenAlone(deps: Deps, req: ChatHttpRequest): string | null {
  const token = svcTokenOf(req);
  return token === null ? null : hmacSecret(deps.keys.hmac, token);
}

/**
 * The token's holder as the actor of a call, read live by the HMAC already worked out: what actorOf
 * answers for an `svc_` token when no org is named (src/models/actor.ts), viewers refused.
 */
async function spendingTokenHolder(auth: Auth, tokenHash: string): Promise<Actor> {
  const holder = tokenHolderActor(await auth.resolveApiTokenHash(tokenHash));
  assertCanSpend(holder.role);
  return holder;
}

/** A call whose org's hold taken ahead was claimed as its request arrived, its caller's read under way. */
interface SpareStart {
  orgKey: string;
  claimed: Promise<SpareHold | null>;
  actor: Promise<Actor>;
  used: boolean;
}

/** What startSpareAdmission learned of a request: the token's HMAC (worked out once), and its spare start. */
interface ChatStart {
  tokenHash: string;
  spare: SpareStart | null;
}

const CHAT_START = Symbol('svc.chatStart');
type WithChatStart = ChatHttpRequest & { [CHAT_START]?: ChatStart };

/**
 * Mounted before the body parser on POST /v1/chat/completions: when the caller is an `svc_` token alone
 * whose org has a hold taken ahead here (spare-holds.ts), claims it and starts the caller's live read at
 * once, so that the read's round trip runs while the body is read and parsed. The handler then needs
 * only the read's answer (withSpare). A request that never reaches the handler (a body the parser
 * refuses, a client gone) puts the spare back.
 */
export function startSpareAdmission(deps: Deps, auth: Auth) {
  return (req: ChatHttpRequest, res: ServerResponse, next: () => void) => {
    const tokenHash = svcTokenAlone(deps, req);
    if (tokenHash === null) return next();
    const chat: ChatStart = { tokenHash, spare: null };
    (req as WithChatStart)[CHAT_START] = chat;
    const orgKey = deps.models.tokenOrgs.get(tokenHash);
    const claimed = orgKey === undefined ? null : deps.models.spares.claim(orgKey);
    if (orgKey !== undefined && claimed) {
      // The read the general way makes (actorOf), by the HMAC already worked out.
      const actor = spendingTokenHolder(auth, tokenHash);
      actor.catch(() => {}); // awaited by the handler; a request that never gets there must not leave it unhandled
      // The call's slot, taken once its caller is known live and while the body is still read (the
      // hold waits for it: src/models/lease.ts). Never before the read: a revoked token takes no slot.
      void actor.then((a) => chatLease(deps, req, res, a.orgKey)).catch(() => {});
      const start: SpareStart = { orgKey, claimed, actor, used: false };
      chat.spare = start;
      res.once('close', () => {
        if (!start.used) putBackClaimed(deps, start);
      });
    }
    next();
  };
}

/** The HMAC of the caller's `svc_` token when startSpareAdmission found it alone, else null. */
export function startedTokenHash(req: ChatHttpRequest): string | null {
  return (req as WithChatStart)[CHAT_START]?.tokenHash ?? null;
}

function putBackClaimed(deps: Deps, start: SpareStart) {
  void start.claimed.then((spare) => spare && deps.models.spares.putBack(start.orgKey, spare));
}

/** The one-statement admission (or a claimed spare's), else null: the caller then takes the general way. */
export async function admitChat(
  deps: Deps,
  auth: Auth,
  req: ChatHttpRequest,
  res: ServerResponse,
  intake: Intake,
): Promise<AdmittedChat | null> {
  const chat = (req as WithChatStart)[CHAT_START];
  if (chat?.spare) {
    chat.spare.used = true;
    return withSpare(deps, req, res, chat.spare, intake);
  }
  const tokenHash = chat ? chat.tokenHash : svcTokenAlone(deps, req);
  if (tokenHash === null) return null;
  const knownOrg = deps.models.tokenOrgs.get(tokenHash);
  // The slot before the hold (src/models/lease.ts); a round trip before the first byte only when this
  // process has no idle slot of the org (src/models/concurrency.ts, slot reuse). An org not known yet
  // takes the general way, whose caller read comes first (chat-credential.ts remembers the org, so this
  // is rare).
  if (knownOrg === undefined) return null;
  const request = intake.quick(req.body);
  if (!request) return null;
  const lease = await chatLease(deps, req, res, knownOrg);
  try {
    const admitted = await admitWithLease(deps, auth, tokenHash, knownOrg, request);
    return admitted && { ...admitted, lease };
  } catch (err) {
    await lease.release();
    throw err;
  }
}

/** The one-statement admission, once the call's slot in `knownOrg` is held. */
async function admitWithLease(
  deps: Deps,
  auth: Auth,
  tokenHash: string,
  knownOrg: string,
  request: ChatRequest,
): Promise<Omit<AdmittedChat, 'lease'> | null> {
  const { spares } = deps.models;
  const plan = planHold(deps, request);
  let admission: Admission;
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
    throw new AppError(403, 'not_a_member', 'the user does not belong to this organization');
  }
  return {
    actor,
    request,
    call: await heldCall(deps, actor, request, !!request.stream, plan, admission.heldCredits),
  };
}

/** The caller, or the error the account auth gives for the same row (src/models/actor.ts actorFromToken). */
function actorOf(a: Admission): Actor {
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
 * The token's org has a hold taken ahead here, claimed for this call (startSpareAdmission): the live read
 * the general way makes (batched and prepared; no write), then prepareCall with the claimed spare: the
 * call's hold when it covers the call, else back on the shelf and the call holds its own.
 */
async function withSpare(
  deps: Deps,
  req: ChatHttpRequest,
  res: ServerResponse,
  start: SpareStart,
  intake: Intake,
): Promise<AdmittedChat> {
  let actor: Actor;
  let request: ChatRequest;
  let lease: Lease;
  try {
    actor = await start.actor;
    request = await intake.full(req.body, actor);
    // Started as the request arrived (startSpareAdmission); a 429 puts the spare back, nothing written.
    lease = await chatLease(deps, req, res, actor.orgKey);
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

/** Bounded: a process serving very many tokens starts over rather than grow without end. */
export function rememberTokenOrg(map: Map<string, string>, tokenHash: string, orgKey: string) {
  if (map.size >= 10_000) map.clear();
  map.set(tokenHash, orgKey);
}
