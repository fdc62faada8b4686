import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Deps } from '../../deps.js';
import type { Auth } from '../../auth/principal.js';
import { API_TOKEN_PATTERN } from '../../auth/api-token-secret.js';
import { hmacSecret } from '../../crypto/hash.js';
import { invalidToken } from '../../http/errors.js';
import { bearerOf } from '../../http/bearer.js';
import {
  actorOf,
  assertCanSpend,
  assertModelScope,
  ORG_HEADER,
  tokenHolderActor,
  type Actor,
} from './actor.js';
import type { Lease } from '../slot/concurrency.js';
import { acquireLease } from '../slot/lease.js';
import type { SpareHold } from './spare-holds.js';

// A model call's admission from the moment its request arrives (CONTRACT §7, §9; docs/contributing/
// model-path.md): one `Admission` value, made by the route's first step (startAdmission) before the body is
// read, and handed to every step after it, down to the call (src/models/call.ts). It holds what the steps
// before the body learned, so that the call does not ask again:
//
//  - the HMAC of an `svc_` token that alone names who acts (worked out once: decision 0002);
//  - the org's hold taken ahead, claimed as the request arrived, with its caller's read under way
//    (decision 0003);
//  - the caller, when it was read before the body (the general way: decision 0004);
//  - the call's slot, started as soon as the org is known (decision 0020).
//
// The credential is checked before the body is read: a body is up to 10 MB and parsing it costs far more
// than the check, so a caller with no valid credential must not get the parse (readCallerBeforeBody).

/** A request as the model route reads it: Express's, or a plain one on the chat call's own entry (no query). */
export type ModelHttpRequest = IncomingMessage & { body?: unknown; query?: Record<string, unknown> };

/** The org's hold taken ahead here, claimed for this call as its request arrived, its caller's read under way. */
export interface SpareStart {
  orgKey: string;
  claimed: Promise<SpareHold | null>;
  actor: Promise<Actor>;
  used: boolean;
}

export class Admission {
  /** The org's hold taken ahead, claimed as the request arrived (startAdmission), else null. */
  spare: SpareStart | null = null;
  /** The caller, when it was read before the body (readCallerBeforeBody, the general way). */
  caller: Actor | undefined;
  /** The call's slot per org: started once, awaited later (same promise); given back when the answer closes. */
  private readonly leases = new Map<string, Promise<Lease>>();

  constructor(
    private readonly deps: Deps,
    private readonly res: ServerResponse,
    /** The HMAC of the bearer when the caller is an `svc_` token and nothing else names who acts, else null. */
    readonly tokenHash: string | null,
  ) {}

  /**
   * The call's slot in `orgKey` (CONTRACT §9), held before its hold is written: a call refused 429
   * `concurrency_limit` writes nothing. Safe to call as soon as the org is known and again later (same
   * promise); a 429 or 503 rejects it. Every lease taken is given back when the response closes (a request
   * refused before its call, a client gone), and by the call when it ends; Lease.release is idempotent.
   */
  lease(orgKey: string): Promise<Lease> {
    const started = this.leases.get(orgKey);
    if (started) return started;
    const lease = acquireLease(this.deps, orgKey, 'chat');
    lease.catch(() => {}); // awaited by the call; a request that never gets there must not leave it unhandled
    this.leases.set(orgKey, lease);
    if (this.res.closed) releaseWhenTaken(lease);
    else this.res.once('close', () => releaseWhenTaken(lease));
    return lease;
  }
}

const releaseWhenTaken = (lease: Promise<Lease>) =>
  void lease.then(
    (l) => l.release(),
    () => {},
  );

/** The HMAC of the bearer when the caller is an `svc_` token and nothing else names who acts, else null. */
function svcTokenAlone(deps: Deps, req: ModelHttpRequest): string | null {
  if (req.headers[ORG_HEADER] !== undefined || req.query?.org_id !== undefined) return null;
  const token = bearerOf(req.headers.authorization);
  return token && API_TOKEN_PATTERN.test(token) ? hmacSecret(deps.keys.hmac, token) : null;
}

/**
 * The token's holder as the actor of a call, read live by the HMAC already worked out: what actorOf
 * answers for an `svc_` token when no org is named (src/models/admission/actor.ts), viewers refused.
 */
async function spendingTokenHolder(auth: Auth, tokenHash: string): Promise<Actor> {
  const holder = tokenHolderActor(await auth.resolveApiTokenHash(tokenHash));
  assertCanSpend(holder.role);
  return holder;
}

/**
 * The first step, before the body is read. When the caller is an `svc_` token alone whose org has a hold
 * taken ahead here (spare-holds.ts), claims it and starts the caller's live read at once, so that the
 * read's round trip runs while the body is read and parsed; the call then needs only the read's answer. A
 * request that never reaches the call (a body the parser refuses, a client gone) puts the spare back.
 */
export function startAdmission(
  deps: Deps,
  auth: Auth,
  req: ModelHttpRequest,
  res: ServerResponse,
): Admission {
  const admission = new Admission(deps, res, svcTokenAlone(deps, req));
  const { tokenHash } = admission;
  if (tokenHash === null) return admission;
  const orgKey = deps.models.tokenOrgs.get(tokenHash);
  const claimed = orgKey === undefined ? null : deps.models.spares.claim(orgKey);
  if (orgKey !== undefined && claimed) {
    // The read the general way makes (actorOf), by the HMAC already worked out.
    const actor = spendingTokenHolder(auth, tokenHash);
    actor.catch(() => {}); // awaited by the call; a request that never gets there must not leave it unhandled
    // The call's slot, taken once its caller is known live and while the body is still read (the hold
    // waits for it). Never before the read: a revoked token takes no slot.
    void actor.then((a) => admission.lease(a.orgKey)).catch(() => {});
    const start: SpareStart = { orgKey, claimed, actor, used: false };
    admission.spare = start;
    res.once('close', () => {
      if (!start.used) putBackClaimed(deps, start);
    });
  }
  return admission;
}

export function putBackClaimed(deps: Deps, start: SpareStart) {
  void start.claimed.then((spare) => spare && deps.models.spares.putBack(start.orgKey, spare));
}

/**
 * The second step, still before the body is read: the caller's credential.
 *
 *  - An `svc_` token alone that this process has admitted before (deps.models.tokenOrgs): the admission
 *    reads it live with the call's hold in one statement after the parse (chat-admission.ts); a second
 *    read here would cost every call a round trip before its first byte. Such a token was live when
 *    admitted; one revoked since is refused by that read, after its body was parsed. Nothing to wait for:
 *    null, and the route goes on without a promise in between.
 *  - An `svc_` token alone not seen before: read now (one round trip, the token's first call in this
 *    process); unknown or revoked is 401 at once.
 *  - Every other caller (a model grant, a header or org_id naming the org, a malformed credential, none):
 *    the general way's first step is the caller's read (actorOf), so it runs here, before the body, and
 *    the call uses its answer (admission.caller).
 */
export function readCallerBeforeBody(
  deps: Deps,
  auth: Auth,
  admission: Admission,
  req: ModelHttpRequest,
): Promise<void> | null {
  const { tokenHash } = admission;
  if (tokenHash !== null && deps.models.tokenOrgs.has(tokenHash)) return null;
  return readCaller(deps, auth, admission, req);
}

async function readCaller(deps: Deps, auth: Auth, admission: Admission, req: ModelHttpRequest) {
  const { tokenHash } = admission;
  if (tokenHash !== null) {
    const principal = await auth.resolveApiTokenHash(tokenHash);
    if (!principal || principal.kind !== 'api_token') throw invalidToken();
    // Only a token that may reach the model routes is remembered for the one-statement admission.
    assertModelScope(principal.scopes);
    // Its org, for the one-statement admission and the call's slot (chat-admission.ts).
    rememberTokenOrg(deps.models.tokenOrgs, tokenHash, principal.orgKey);
    return;
  }
  const actor = await actorOf(deps, auth, req, { spend: true });
  admission.caller = actor;
  // The call's slot, taken while the body is read: its hold waits for it.
  void admission.lease(actor.orgKey);
}

/** Bounded: a process serving very many tokens starts over rather than grow without end. */
export function rememberTokenOrg(map: Map<string, string>, tokenHash: string, orgKey: string) {
  if (map.size >= 10_000) map.clear();
  map.set(tokenHash, orgKey);
}
