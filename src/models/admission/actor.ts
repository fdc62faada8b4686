import type { IncomingMessage } from 'node:http';
import { decodeProtectedHeader } from 'jose';
import type { Deps } from '../../deps.js';
import type { Auth, Principal } from '../../auth/principal.js';
import type { Role } from '../../db/schema.js';
import { insufficientScope, invalidToken, errorOf, COMMON_ERRORS } from '../../http/errors.js';
import { MODEL_ERRORS } from '../errors.js';
import { requestOrigin } from '../../http/origin.js';
import { bearerOf } from '../../http/bearer.js';
import { parseOrgId } from '../../ids.js';
import { liveRole } from '../../orgs/membership.js';
import { resolveActingOrg, verifyAccessToken } from '../../../oauth/verify.js';

// Who acts on a model route (interface document: Authentication 4–8; CONTRACT §7, §9):
//  - an `svc_` token acts for its own organization and user (billing and concurrency use the
//    credential's organization);
//  - a model grant (an access token for the resource {origin}/v1) acts for its `org`, or for the org
//    named by `x-svc-organisation` when the user is a live member there.
// Cookies and session JWTs never authenticate these routes (§7). Membership is read live on every call.

export interface Actor {
  userId: string;
  orgKey: string;
  role: Role;
  via: 'api_token' | 'model_grant';
  /** Which credential acts: recorded with each call's usage (src/db/tables/usage.ts). */
  credential: ActorCredential;
}

/** An `svc_` token's id, or an OAuth model grant and the OAuth client it was issued to. */
export interface ActorCredential {
  apiTokenId: number | null;
  grantId: string | null;
  oauthClientId: string | null;
}

export const apiTokenCredential = (apiTokenId: number): ActorCredential => ({
  apiTokenId,
  grantId: null,
  oauthClientId: null,
});

export const ORG_HEADER = 'x-svc-organisation';

const notAMember = () => errorOf(COMMON_ERRORS, 'NOT_A_MEMBER');

/** True when the bearer looks like an ES256 JWT (a grant), not an HS256 session. */
export function isGrantShaped(token: string): boolean {
  try {
    return decodeProtectedHeader(token).alg === 'ES256';
  } catch {
    return false;
  }
}

export interface TokenInput {
  token: string;
  origin: string;
  orgHeader: string | undefined;
}

/**
 * An `svc_` token's holder acts only as a live member of a live organization (`role` null otherwise)
 * with a verified e-mail address (Authentication 5); one rule for every way a token comes in.
 */
export function assertTokenHolderActive(holder: { role: Role | null; emailVerified: boolean }): Role {
  if (!holder.role) throw notAMember();
  if (!holder.emailVerified) throw errorOf(COMMON_ERRORS, 'EMAIL_NOT_VERIFIED');
  return holder.role;
}

/** The model routes (chat, responses, messages, models, agents, runs) are the `model` scope (CONTRACT §6). */
export function assertModelScope(scopes: readonly string[]) {
  if (!scopes.includes('model')) throw insufficientScope('model');
}

/** The holder of an `svc_` token (resolved by the account auth) as the actor; 401 when it resolved to none. */
export function tokenHolderActor(principal: Principal | null, orgHeader?: string): Actor {
  if (!principal || principal.kind !== 'api_token') throw invalidToken();
  assertModelScope(principal.scopes);
  const role = assertTokenHolderActive(principal);
  // The durable credential is bound to its organization: a header naming another one is refused.
  if (orgHeader && parseOrgId(orgHeader) !== principal.orgKey) {
    throw errorOf(MODEL_ERRORS, 'ORG_MISMATCH', `${ORG_HEADER} does not name this credential's organization`);
  }
  return {
    userId: principal.userId,
    orgKey: principal.orgKey,
    role,
    via: 'api_token',
    credential: apiTokenCredential(principal.tokenId),
  };
}

/** Resolves a bearer credential (HTTP header or the run socket's auth frame) to the acting user and org. */
export async function actorFromToken(deps: Deps, auth: Auth, input: TokenInput): Promise<Actor> {
  const { token, origin, orgHeader } = input;
  if (token.startsWith('svc_')) {
    return tokenHolderActor(await auth.resolveApiToken(token), orgHeader);
  }
  if (!isGrantShaped(token)) throw invalidToken();
  const grant = await verifyAccessToken(deps, token, { resource: 'model', origin });
  // A /v1 grant asked for `account` alone reads the account routes but calls no model (CONTRACT §7).
  assertModelScope(grant.scope.split(' '));
  // Without x-svc-organisation the grant's org acts, and the verifier has just read that membership
  // live (as mcp/guard.ts does); a named org is read as its own live membership.
  const acting = orgHeader?.trim()
    ? await resolveActingOrg(deps, grant, orgHeader)
    : { orgKey: grant.orgKey, role: grant.role };
  return {
    userId: grant.userId,
    orgKey: acting.orgKey,
    role: acting.role,
    via: 'model_grant',
    credential: { apiTokenId: null, grantId: grant.grantId, oauthClientId: grant.clientId },
  };
}

/** A model route's request: Express's, or a plain node one on the chat call's own entry (no query). */
export type ModelRequest = Pick<IncomingMessage, 'headers' | 'socket'> & { query?: Record<string, unknown> };

/** A header as Express's req.get reads it (node joins a repeated custom header into one value). */
const headerOf = (req: ModelRequest, name: string): string | undefined => {
  const v = req.headers[name];
  return Array.isArray(v) ? v.join(', ') : v;
};

/** The actor of an HTTP request to a model route. `spend` refuses viewers (CONTRACT §7). */
export async function actorOf(
  deps: Deps,
  auth: Auth,
  req: ModelRequest,
  opts: { spend: boolean },
): Promise<Actor> {
  const token = bearerOf(headerOf(req, 'authorization'));
  if (!token) throw invalidToken();
  const actor = await actorFromToken(deps, auth, {
    token,
    origin: requestOrigin(req, deps.config),
    orgHeader: headerOf(req, ORG_HEADER),
  });
  checkOrgQuery(req, actor);
  if (opts.spend) assertCanSpend(actor.role);
  return actor;
}

/** `org_id` in the query, when sent (either spelling), must be the acting organization (CONTRACT §9). */
export function checkOrgQuery(req: ModelRequest, actor: Pick<Actor, 'orgKey'>) {
  const raw = req.query?.org_id;
  if (raw === undefined) return;
  if (typeof raw !== 'string' || parseOrgId(raw) !== actor.orgKey) {
    throw errorOf(MODEL_ERRORS, 'ORG_MISMATCH', 'org_id does not match the acting organization', {
      param: 'org_id',
    });
  }
}

export function assertCanSpend(role: Role) {
  if (role === 'viewer') throw errorOf(MODEL_ERRORS, 'viewer_cannot_spend');
}

/** Revalidates membership before each model call of a long-lived run (Authentication 5). */
export async function revalidate(deps: Deps, actor: Actor): Promise<Actor> {
  const role = await liveRole(deps.db, actor.userId, actor.orgKey);
  if (!role) throw notAMember();
  assertCanSpend(role);
  return { ...actor, role };
}
