import { and, eq, isNull } from 'drizzle-orm';
import { errors as joseErrors, jwtVerify, type JWTHeaderParameters } from 'jose';
import type { Deps } from '../src/deps.js';
import { oauthGrants, type OAuthResource, type Role } from '../src/db/schema.js';
import { AppError, membershipUnavailable } from '../src/http/errors.js';
import { parseOrgId } from '../src/ids.js';
import { liveRole, requireLiveMembership } from '../src/orgs/membership.js';
import { SIGNING_ALG } from './keys.js';
import { resourceMetadataUrl, resourceUrl } from './resources.js';

// The one verifier every resource server uses (CONTRACT §7): the MCP server for `platform`, the model
// routes for `model`. It checks signature, issuer (byte-identical to the origin the request arrived
// on), audience (that origin's resource URL), expiry, that the grant is not revoked, and live
// membership — the last two against the database on every call, never from a cache, so a revocation
// or a removal takes effect on the next request. It takes a bearer string: cookies never reach it.

export { resourceUrl };

export interface VerifiedAccess {
  userId: string;
  orgKey: string;
  clientId: string;
  grantId: string;
  scope: string;
  resource: OAuthResource;
  jti: string;
}

function invalidToken(origin: string, resource: OAuthResource, description: string): AppError {
  return new AppError(401, 'invalid_token', description, {
    headers: {
      'WWW-Authenticate': `Bearer error="invalid_token", resource_metadata="${resourceMetadataUrl(origin, resource)}"`,
    },
  });
}

export async function verifyAccessToken(
  deps: Pick<Deps, 'db' | 'signingKeys'>,
  token: string,
  opts: { resource: OAuthResource; origin: string },
): Promise<VerifiedAccess> {
  const { resource, origin } = opts;
  let payload;
  try {
    ({ payload } = await jwtVerify(
      token,
      async (header: JWTHeaderParameters) => {
        const key = header.kid ? await deps.signingKeys.publicKey(header.kid) : null;
        if (!key) throw new joseErrors.JWKSNoMatchingKey();
        return key;
      },
      {
        algorithms: [SIGNING_ALG],
        typ: 'at+jwt', // RFC 9068 §4: reject other JWTs (an ID token, a session) presented as access tokens
        issuer: origin,
        audience: resourceUrl(origin, resource),
        requiredClaims: ['sub', 'jti', 'iat', 'exp', 'client_id', 'org'],
      },
    ));
  } catch (err) {
    if (err instanceof joseErrors.JOSEError) throw invalidToken(origin, resource, 'the access token is not valid here');
    throw err;
  }
  const orgKey = typeof payload.org === 'string' ? parseOrgId(payload.org) : null;
  const grantId = payload.grant_id;
  if (!orgKey || typeof grantId !== 'string' || typeof payload.client_id !== 'string' || typeof payload.scope !== 'string') {
    throw invalidToken(origin, resource, 'the access token is not valid here');
  }
  let live;
  try {
    [live] = await deps.db
      .select({ id: oauthGrants.id })
      .from(oauthGrants)
      .where(
        and(
          eq(oauthGrants.id, grantId),
          eq(oauthGrants.userId, payload.sub!),
          eq(oauthGrants.org, orgKey),
          eq(oauthGrants.resource, resource),
          isNull(oauthGrants.revokedAt),
        ),
      );
  } catch {
    throw membershipUnavailable();
  }
  if (!live) throw invalidToken(origin, resource, 'the grant behind this token was revoked');
  await requireLiveMembership(deps.db, payload.sub!, orgKey);
  return {
    userId: payload.sub!,
    orgKey,
    clientId: payload.client_id,
    grantId,
    scope: payload.scope,
    resource,
    jti: payload.jti!,
  };
}

/**
 * The organization a model or MCP request acts for (CONTRACT §7): `x-svc-organisation` (either id
 * spelling) when sent — it must be a live membership of the token's user, else 403 — otherwise the
 * grant's org. Returns the live role; callers refuse spending for `viewer` (403 viewer_cannot_spend).
 */
export async function resolveActingOrg(
  deps: Pick<Deps, 'db'>,
  access: { userId: string; orgKey: string },
  headerValue: string | string[] | undefined,
): Promise<{ orgKey: string; role: Role }> {
  const raw = Array.isArray(headerValue) ? headerValue[0] : headerValue;
  if (raw === undefined || raw.trim() === '') {
    return { orgKey: access.orgKey, role: await requireLiveMembership(deps.db, access.userId, access.orgKey) };
  }
  const orgKey = parseOrgId(raw);
  const role = orgKey ? await liveRole(deps.db, access.userId, orgKey) : null;
  if (!orgKey || !role) throw new AppError(403, 'NOT_A_MEMBER', 'x-svc-organisation names an organization this user does not belong to');
  return { orgKey, role };
}
