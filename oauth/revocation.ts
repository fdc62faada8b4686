import { Router } from 'express';
import { eq } from 'drizzle-orm';
import { errors as joseErrors, jwtVerify, type JWTHeaderParameters, type JWTPayload } from 'jose';
import type { Deps } from '../src/deps.js';
import { oauthGrants, oauthRefreshTokens } from '../src/db/schema.js';
import { hmacSecret } from '../src/crypto/hash.js';
import { requestOrigin } from '../src/http/origin.js';
import { auditOriginOf } from '../src/audit/context.js';
import { orgIdOf } from '../src/ids.js';
import { liveRole } from '../src/orgs/membership.js';
import { authenticateClient } from './client-auth.js';
import { REFRESH_TOKEN_PATTERN, revokeGrants, type GrantRow } from './grants.js';
import { SIGNING_ALG } from './keys.js';
import { OAuthProtocolError } from './params.js';

// POST /oauth/revoke (RFC 7009) and POST /oauth/introspect (RFC 7662), for both token kinds.
//
// Revocation is per grant (CONTRACT §7 "each grant is its own"): revoking a refresh token or an access
// token revokes the grant behind it, so every token of that grant stops working at once (access tokens
// are checked against the grant on every use). The other grant of the same approval is untouched.
//
// Introspection client authentication (RFC 7662 §2.1 leaves it to us): the same client authentication
// as the token endpoint, and a client only learns about tokens issued to itself — anything else is
// {active: false}, exactly like an unknown token.

interface FoundToken {
  kind: 'access_token' | 'refresh_token';
  grant: GrantRow;
  claims?: JWTPayload;
  expiresAt: Date;
  issuedAt: Date;
  /** A refresh token already exchanged for its successor. */
  rotated?: boolean;
}

async function findToken(deps: Deps, token: string, issuer: string): Promise<FoundToken | null> {
  if (REFRESH_TOKEN_PATTERN.test(token)) {
    const [row] = await deps.db
      .select({ rt: oauthRefreshTokens, grant: oauthGrants })
      .from(oauthRefreshTokens)
      .innerJoin(oauthGrants, eq(oauthGrants.id, oauthRefreshTokens.grantId))
      .where(eq(oauthRefreshTokens.tokenHash, hmacSecret(deps.keys.hmac, token)));
    if (!row || row.grant.issuer !== issuer) return null;
    return {
      kind: 'refresh_token',
      grant: row.grant,
      expiresAt: row.rt.expiresAt,
      issuedAt: row.rt.createdAt,
      rotated: row.rt.rotatedAt !== null,
    };
  }
  let claims: JWTPayload;
  try {
    ({ payload: claims } = await jwtVerify(
      token,
      async (header: JWTHeaderParameters) => {
        const key = header.kid ? await deps.signingKeys.publicKey(header.kid) : null;
        if (!key) throw new joseErrors.JWKSNoMatchingKey();
        return key;
      },
      { algorithms: [SIGNING_ALG], typ: 'at+jwt', issuer },
    ));
  } catch (err) {
    if (err instanceof joseErrors.JOSEError) return null;
    throw err;
  }
  if (typeof claims.grant_id !== 'string') return null;
  const [grant] = await deps.db.select().from(oauthGrants).where(eq(oauthGrants.id, claims.grant_id));
  if (!grant) return null;
  return {
    kind: 'access_token',
    grant,
    claims,
    expiresAt: new Date(claims.exp! * 1000),
    issuedAt: new Date(claims.iat! * 1000),
  };
}

/** The form's `token` (req.body is whatever the form parser made of the request: maybe nothing). */
function tokenParam(body: unknown): string {
  const token = typeof body === 'object' && body !== null ? (body as { token?: unknown }).token : undefined;
  if (typeof token !== 'string' || token === '')
    throw new OAuthProtocolError('invalid_request', 'token is required');
  return token;
}

export function revocationRoutes(deps: Deps): Router {
  const router = Router();

  router.post('/oauth/revoke', async (req, res) => {
    res.set('Cache-Control', 'no-store');
    const client = await authenticateClient(deps, req);
    const token = tokenParam(req.body);
    const found = await findToken(deps, token, requestOrigin(req, deps.config));
    // RFC 7009 §2.2: an unknown or invalid token is answered 200 — nothing to revoke, nothing revealed.
    // A token of another client is left alone and answered the same way (no oracle).
    if (found && found.grant.clientId === client.clientId)
      await revokeGrants(deps.db, [found.grant.id], 'revoked_by_client', auditOriginOf(req));
    res.status(200).end();
  });

  router.post('/oauth/introspect', async (req, res) => {
    res.set('Cache-Control', 'no-store');
    const client = await authenticateClient(deps, req);
    const token = tokenParam(req.body);
    const found = await findToken(deps, token, requestOrigin(req, deps.config));
    const live =
      found &&
      !found.rotated &&
      found.grant.clientId === client.clientId &&
      !found.grant.revokedAt &&
      found.expiresAt > new Date() &&
      (await liveRole(deps.db, found.grant.userId, found.grant.org)) !== null;
    if (!found || !live) {
      res.json({ active: false });
      return;
    }
    const claims = found.claims;
    res.json({
      active: true,
      token_type: found.kind === 'access_token' ? 'Bearer' : 'refresh_token',
      scope: found.grant.scope,
      client_id: found.grant.clientId,
      sub: found.grant.userId,
      org: orgIdOf(found.grant.org),
      iss: found.grant.issuer,
      exp: Math.floor(found.expiresAt.getTime() / 1000),
      iat: Math.floor(found.issuedAt.getTime() / 1000),
      ...(claims ? { aud: claims.aud, jti: claims.jti } : {}),
    });
  });

  return router;
}
