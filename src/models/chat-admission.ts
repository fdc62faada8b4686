import type { Request } from 'express';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { API_TOKEN_PATTERN } from '../auth/api-token-secret.js';
import { hmacSecret } from '../crypto/hash.js';
import { AppError, invalidToken, membershipUnavailable } from '../http/errors.js';
import { assertCanSpend, assertTokenHolderActive, ORG_HEADER, type Actor } from './actor.js';
import type { Admission } from './admit.js';
import { cannotPay, heldCall, planHold, type PreparedCall } from './metered.js';
import { voidHold } from '../billing/spend.js';
import { chatRequest, type ChatRequest } from './schema.js';

// The short way in for POST /v1/chat/completions: when the caller is an `svc_` token and nothing else
// names who acts (no x-svc-organisation header, no org_id), the token's live read and the call's hold go
// in one statement (admit.ts) instead of an auth round trip and then a hold round trip: one round trip
// fewer before the first byte, and one statement fewer per batch under load. It answers exactly as the
// general way (actorOf, then prepareCall) would: the same row, the same checks in the same order
// (Authentication 4–8, CONTRACT §7, §9). Anything else (a model grant, a header, org_id, a body that does
// not parse, so that a bad credential still answers 401 before a bad body's 400) returns null and takes
// the general way. So does a token whose org has a hold taken ahead here (spare-holds.ts): its call needs
// only the read, which the general way makes.

export interface AdmittedChat {
  actor: Actor;
  request: ChatRequest;
  call: PreparedCall;
}

const SVC_BEARER = /^Bearer\s+(svc_\S+)\s*$/i;

export async function admitChat(deps: Deps, auth: Auth, req: Request): Promise<AdmittedChat | null> {
  if (req.get(ORG_HEADER) !== undefined || req.query.org_id !== undefined) return null;
  const token = SVC_BEARER.exec(req.get('authorization') ?? '')?.[1];
  if (!token || !API_TOKEN_PATTERN.test(token)) return null;
  const tokenHash = hmacSecret(deps.keys.hmac, token);
  const { spares, tokenOrgs } = deps.models;
  const knownOrg = tokenOrgs.get(tokenHash);
  if (knownOrg !== undefined && spares.has(knownOrg)) return null;
  const parsed = chatRequest.safeParse(req.body);
  if (!parsed.success) return null;
  const request = parsed.data;

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
    // Fail closed (Authentication 5): no membership read, no call.
    throw membershipUnavailable();
  }
  if (admission.tokenId !== null) auth.touchApiToken(admission.tokenId);
  if (admission.orgKey !== null && knownOrg === undefined) rememberTokenOrg(tokenOrgs, tokenHash, admission.orgKey);
  let actor: Actor;
  try {
    actor = actorOf(admission);
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
    throw cannotPay();
  }
  if (admission.outcome !== 'held') {
    // Nothing was held: a caller the statement refused that the checks above let through would be a bug
    // in one of the two; refuse rather than run an unbilled call.
    throw new AppError(403, 'not_a_member', 'the user does not belong to this organization');
  }
  return { actor, request, call: await heldCall(deps, actor, request, !!request.stream, plan, admission.heldCredits) };
}

/** The caller, or the error the account auth gives for the same row (src/models/actor.ts actorFromToken). */
function actorOf(a: Admission): Actor {
  if (a.outcome === 'no_token') throw invalidToken();
  const role = assertTokenHolderActive({ role: a.orgDeleted ? null : a.role, emailVerified: a.emailVerified });
  assertCanSpend(role);
  return { userId: a.userId!, orgKey: a.orgKey!, role, via: 'api_token' };
}

/** Bounded: a process serving very many tokens starts over rather than grow without end. */
function rememberTokenOrg(map: Map<string, string>, tokenHash: string, orgKey: string) {
  if (map.size >= 10_000) map.clear();
  map.set(tokenHash, orgKey);
}
