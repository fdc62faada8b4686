import type { ServerResponse } from 'node:http';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { invalidToken } from '../http/errors.js';
import { actorOf, assertModelScope, type Actor } from './actor.js';
import { rememberTokenOrg, startedTokenHash, type ChatHttpRequest } from './chat-admission.js';
import { chatLease } from './lease.js';

// The chat call's credential is checked before its body is read: a body is up to
// 10 MB and parsing it costs far more than the check, so a caller with no valid credential must not get
// the parse. Mounted after startSpareAdmission (which has worked out an `svc_` token's HMAC) and before
// the body parser, on both ways in (src/models/chat-entry.ts, src/app.ts).
//
//  - An `svc_` token alone that this process has admitted before (deps.models.tokenOrgs): the admission
//    reads it live with the call's hold in one statement after the parse (chat-admission.ts); a second
//    read here would cost every call a round trip before its first byte. Such a token was live when
//    admitted; one revoked since is refused by that read, after its body was parsed.
//  - An `svc_` token alone not seen before: read now (one round trip, the token's first call in this
//    process); unknown or revoked is 401 at once.
//  - Every other caller (a model grant, a header or org_id naming the org, a malformed credential, none):
//    the general way's first step is the caller's read (actorOf), so it runs here, before the body, and
//    the route uses its answer (callerReadEarly).

const EARLY_ACTOR = Symbol('svc.chatEarlyActor');
type WithEarlyActor = ChatHttpRequest & { [EARLY_ACTOR]?: Actor };

export function credentialBeforeBody(deps: Deps, auth: Auth) {
  return (req: ChatHttpRequest, res: ServerResponse, next: (err?: unknown) => void) => {
    const tokenHash = startedTokenHash(req);
    // The common call goes on at once, without a promise in between.
    if (tokenHash !== null && deps.models.tokenOrgs.has(tokenHash)) return next();
    readCaller(deps, auth, req, res, tokenHash).then(() => next(), next);
  };
}

async function readCaller(
  deps: Deps,
  auth: Auth,
  req: ChatHttpRequest,
  res: ServerResponse,
  tokenHash: string | null,
) {
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
  (req as WithEarlyActor)[EARLY_ACTOR] = actor;
  // The call's slot, taken while the body is read: its hold waits for it (src/models/lease.ts).
  void chatLease(deps, req, res, actor.orgKey);
}

/** The caller as credentialBeforeBody read it, when it took the general way. */
export function callerReadEarly(req: ChatHttpRequest): Actor | undefined {
  return (req as WithEarlyActor)[EARLY_ACTOR];
}
