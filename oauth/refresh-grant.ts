import type { Deps } from '../src/deps.js';
import type { AuditOrigin } from '../src/audit/context.js';
import type { OAuthResource } from '../src/db/schema.js';
import { authenticateCredentials } from './client-auth.js';
import { issueAccessToken, successorOf, type GrantTokens } from './grants.js';
import { OAuthProtocolError, parseResources, singleValue } from './params.js';
import {
  findRefreshToken,
  isRetryWithinGrace,
  revokeFamily,
  rotateRefreshToken,
  type RefreshGrant,
} from './refresh.js';
import { resourceUrl } from './resources.js';

// The refresh grant (RFC 6749 §6; CONTRACT §7; docs/decisions/0085-one-refresh-handler.md) as one
// function in the order of the RFC: the client, the request's parameters, find the token, check it,
// reuse of a rotated token ⇒ revoke its family (RFC 9700 §4.14.2), check the request against the
// grant, rotate, issue. Every refusal is an OAuthProtocolError, rendered by the error handling in the
// RFC 6749 shape.

export const REFRESH_TOKEN_GRANT = 'refresh_token';

/** The token response of a refresh: the one grant the refresh token belongs to (CONTRACT §7). */
export interface RefreshResponse {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  refresh_token: string;
  scope: string;
  grants: [GrantTokens];
}

export interface RefreshTokenRequest {
  /** The origin the request arrived on: the only issuer whose grants it may refresh (RFC 9700 §4.4). */
  issuer: string;
  /** The form (RFC 6749 §6), client credentials included or decoded into it from Basic. */
  form: Record<string, unknown>;
  /** Who revokes a grant whose rotated token came back (oauth/token.ts). */
  auditOrigin: AuditOrigin;
}

/** RFC 6749 Appendix A.17: refresh-token = 1*VSCHAR. */
const VSCHAR = /^[\u0020-\u007E]+$/;
/** RFC 6749 Appendix A.4: scope-tokens (1*NQCHAR) and the spaces between them. */
const SCOPE = /^[\u0020-\u0021\u0023-\u005B\u005D-\u007E]+$/;

const invalidGrant = (description: string) => new OAuthProtocolError('invalid_grant', description);

export async function refreshTokenGrant(deps: Deps, request: RefreshTokenRequest): Promise<RefreshResponse> {
  const { issuer, form, auditOrigin } = request;

  // 1. The client (RFC 6749 §6: authenticate a confidential client; a public one names itself).
  const client = await authenticateCredentials(deps, {
    clientId: singleValue(form.client_id, 'client_id') || undefined,
    secret: singleValue(form.client_secret, 'client_secret') || undefined,
  });
  if (!client.grantTypes.includes(REFRESH_TOKEN_GRANT))
    throw new OAuthProtocolError('unauthorized_client', 'this client may not use the refresh_token grant');

  // 2. The request's parameters, before anything is looked up.
  const token = singleValue(form.refresh_token, 'refresh_token');
  if (!token) throw new OAuthProtocolError('invalid_request', 'refresh_token is required');
  if (!VSCHAR.test(token)) throw new OAuthProtocolError('invalid_request', 'refresh_token is malformed');
  const named = parseResources(issuer, form.resource);
  const scope = requestedScope(form.scope);

  // 3. Find the token and its grant. The statement rotates the token at once when the checks below can
  // only pass (the client, the one resource named, no scope to compare); otherwise it only reads, so a
  // refused request never uses a token up (oauth/refresh.ts findRefreshToken).
  const oneResource = named === null || named.length === 1;
  const found = await findRefreshToken(deps, token, {
    issuer,
    clientId: client.clientId,
    resource: named?.length === 1 ? named[0]! : null,
    rotate: oneResource && scope === null,
  });

  // 4. Check the token: it exists, is unexpired, its grant is live and was granted by this issuer.
  if (!found || !found.live || found.issuer !== issuer) throw invalidGrant('the refresh token is invalid');

  // 5. Reuse of a rotated token, other than a retry inside the grace window, revokes the family.
  if (found.rotatedAtMs !== null && !(await isRetryWithinGrace(deps, token, found.rotatedAtMs))) {
    await revokeFamily(deps, found.grant.id, auditOrigin);
    throw invalidGrant('the refresh token is invalid');
  }

  // 6. Check the request against the grant: its client, its one resource (RFC 8707 §2.2), no scope
  // beyond what was granted (RFC 6749 §6).
  const { grant } = found;
  if (grant.clientId !== client.clientId)
    throw invalidGrant('the refresh token was issued to another client');
  checkNamedResource(issuer, named, grant.resource);
  checkScope(scope, grant.scope);

  // 7. Rotate: a token the find did not rotate (a retry inside the window, a race lost to a parallel
  // refresh, a request with a scope) is marked used now; every such request gets the same successor.
  const successor = found.rotatedNow
    ? successorOf(deps.keys.hmac, token)
    : await rotateRefreshToken(deps, token, grant.id);

  // 8. Issue.
  return issue(deps, issuer, grant, successor);
}

/** RFC 6749 §3.3 scope tokens asked for, or null when the request names none. */
function requestedScope(value: unknown): string[] | null {
  if (value === undefined) return null;
  const s = typeof value === 'string' ? value.trim() : undefined;
  if (!s || !SCOPE.test(s)) throw new OAuthProtocolError('invalid_scope', 'scope is malformed');
  return s.split(/ +/);
}

/** A refresh token belongs to one grant, hence one resource: only that one may be named (RFC 8707 §2.2). */
function checkNamedResource(issuer: string, named: OAuthResource[] | null, resource: OAuthResource): void {
  if (named && (named.length !== 1 || named[0] !== resource))
    throw new OAuthProtocolError(
      'invalid_target',
      `this refresh token is for ${resourceUrl(issuer, resource)}`,
    );
}

/** RFC 6749 §6: the scope "MUST NOT include any scope not originally granted". */
function checkScope(scope: string[] | null, granted: string): void {
  const grantedItems = granted.split(' ');
  if (scope && !scope.every((item) => grantedItems.includes(item)))
    throw new OAuthProtocolError('invalid_scope', 'the scope exceeds what was granted');
}

async function issue(
  deps: Deps,
  issuer: string,
  grant: RefreshGrant,
  refreshToken: string,
): Promise<RefreshResponse> {
  const access = await issueAccessToken(deps, grant, issuer);
  const entry: GrantTokens = {
    resource: resourceUrl(issuer, grant.resource),
    scope: grant.scope,
    access_token: access.token,
    token_type: 'Bearer',
    expires_in: access.expiresIn,
    refresh_token: refreshToken,
  };
  return {
    access_token: entry.access_token,
    token_type: 'Bearer',
    expires_in: entry.expires_in,
    refresh_token: refreshToken,
    scope: grant.scope,
    grants: [entry],
  };
}
