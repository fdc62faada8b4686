import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { and, eq, inArray, isNull } from 'drizzle-orm';
import type { Db } from '../src/db/client.js';
import type { Deps } from '../src/deps.js';
import { oauthGrants, oauthRefreshTokens, type OAuthResource } from '../src/db/schema.js';
import { hmacSecret } from '../src/crypto/hash.js';
import { orgIdOf, randomToken } from '../src/ids.js';
import { signJws } from './keys.js';
import { BUILTIN_CLI_CLIENT_ID } from '../src/ids.js';
import { resourceUrl } from './resources.js';
import { grantScopeOf } from './params.js';
import { grantOfEventColumns, recordGrantEvents } from '../src/audit/grants.js';
import type { AuditOrigin } from '../src/audit/context.js';
import { transaction } from '../src/db/transaction.js';

// Grants (one row per approved resource, CONTRACT §7) and the tokens minted for them: RFC 9068 access
// tokens (typ at+jwt, ES256, 15 min) and refresh tokens stored as HMAC.

export const ACCESS_TOKEN_TTL_SECONDS = 15 * 60;
export const REFRESH_TOKEN_TTL_SECONDS = 30 * 24 * 60 * 60;

export type GrantRow = typeof oauthGrants.$inferSelect;

export interface NewGrant {
  clientId: string;
  userId: string;
  orgKey: string;
  issuer: string;
  /** "All my organizations" ticked on the consent or device page. */
  allOrgs?: boolean;
  /** The approval's scope (oauth/params.ts approvalScope); absent: each resource's full scope. */
  scope?: string | null;
}

/**
 * The organization boundary of a grant (CONTRACT §7): svc-cli acts in every live membership of its
 * user; any other client only in the organization chosen, unless the person granted all of them.
 */
export const grantSpansAllOrgs = (input: Pick<NewGrant, 'clientId' | 'allOrgs'>): boolean =>
  input.clientId === BUILTIN_CLI_CLIENT_ID || input.allOrgs === true;

/** Creates one grant per resource (in the caller's transaction when `db` is one). */
export async function createGrants(
  db: Db,
  input: NewGrant,
  resources: readonly OAuthResource[],
  auditOrigin: AuditOrigin,
): Promise<GrantRow[]> {
  if (resources.length === 0) return [];
  const rows = await db
    .insert(oauthGrants)
    .values(
      resources.map((resource) => ({
        id: `grt_${randomToken()}`,
        clientId: input.clientId,
        userId: input.userId,
        org: input.orgKey,
        resource,
        scope: grantScopeOf(resource, input.scope),
        issuer: input.issuer,
        allOrgs: grantSpansAllOrgs(input),
      })),
    )
    .returning();
  await recordGrantEvents(db, 'grant.approved', rows, auditOrigin);
  return rows;
}

export async function revokeGrants(
  db: Db,
  grantIds: string[],
  reason: string,
  auditOrigin: AuditOrigin,
): Promise<void> {
  if (grantIds.length === 0) return;
  await transaction(db, async (tx) => {
    const rows = await tx
      .update(oauthGrants)
      .set({ revokedAt: new Date() })
      .where(and(inArray(oauthGrants.id, grantIds), isNull(oauthGrants.revokedAt)))
      .returning(grantOfEventColumns);
    await recordGrantEvents(tx, 'grant.revoked', rows, auditOrigin, reason);
  });
}

/** deps.hooks.memberRemoved: a removed member's grants for that org go in the same transaction (CONTRACT §5). */
export async function revokeMemberGrants(
  tx: Db,
  membership: { orgKey: string; userId: string },
  auditOrigin: AuditOrigin,
): Promise<void> {
  const rows = await tx
    .update(oauthGrants)
    .set({ revokedAt: new Date() })
    .where(
      and(
        eq(oauthGrants.org, membership.orgKey),
        eq(oauthGrants.userId, membership.userId),
        isNull(oauthGrants.revokedAt),
      ),
    )
    .returning(grantOfEventColumns);
  await recordGrantEvents(tx, 'grant.revoked', rows, auditOrigin, 'member_removed');
}

export interface AccessToken {
  token: string;
  jti: string;
  expiresIn: number;
}

/** An RFC 9068 access token for one grant, issued by `issuer` (the origin the request arrived on). */
export async function issueAccessToken(
  deps: Pick<Deps, 'signingKeys'>,
  grant: Pick<GrantRow, 'id' | 'clientId' | 'userId' | 'org' | 'resource' | 'scope'>,
  issuer: string,
): Promise<AccessToken> {
  const key = await deps.signingKeys.current();
  const now = Math.floor(Date.now() / 1000);
  const jti = randomUUID();
  // RFC 9068 §2.2: iss, exp, aud, sub, client_id, iat, jti; scope (§2.2.3); typ at+jwt (§2.1).
  const token = signJws(key, 'at+jwt', {
    iss: issuer,
    sub: grant.userId,
    aud: resourceUrl(issuer, grant.resource),
    client_id: grant.clientId,
    scope: grant.scope,
    org: orgIdOf(grant.org),
    // Not in RFC 9068's list but allowed by it (§2.2.3): names the row the verifier checks for revocation.
    grant_id: grant.id,
    jti,
    iat: now,
    exp: now + ACCESS_TOKEN_TTL_SECONDS,
  });
  return { token, jti, expiresIn: ACCESS_TOKEN_TTL_SECONDS };
}

// Refresh tokens: `srt_` + 43 base64url characters. Only the HMAC is stored (CONTRACT §4).
export const REFRESH_TOKEN_PATTERN = /^srt_[A-Za-z0-9_-]{43}$/;

export const newRefreshToken = (): string => `srt_${randomBytes(32).toString('base64url')}`;

/**
 * The successor of a refresh token is derived from it with the server key, so a second, parallel use
 * of the same token inside the grace window can be handed the very same successor without keeping
 * any plaintext (oauth/refresh.ts). The input is domain-separated from the stored hash.
 */
export const successorOf = (hmacKey: Buffer, token: string): string =>
  `srt_${createHmac('sha256', hmacKey).update(`refresh-successor:${token}`).digest('base64url')}`;

/** Stores a refresh token of `grantId`. Idempotent: the derived successor may be stored twice in a race. */
export async function storeRefreshToken(
  db: Db,
  hmacKey: Buffer,
  grantId: string,
  token: string,
): Promise<void> {
  await db
    .insert(oauthRefreshTokens)
    .values({
      tokenHash: hmacSecret(hmacKey, token),
      grantId,
      expiresAt: new Date(Date.now() + REFRESH_TOKEN_TTL_SECONDS * 1000),
    })
    .onConflictDoNothing();
}

export interface GrantTokens {
  resource: string;
  scope: string;
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  refresh_token: string;
}

/**
 * Access + fresh refresh token for a new grant (code exchange, device grant). The refresh token is
 * stored with `db` (the caller's transaction); signing happens outside any transaction (issueApproval),
 * since loading keys uses its own connection and PGlite has only one.
 */
export async function storeNewRefreshToken(db: Db, hmacKey: Buffer, grantId: string): Promise<string> {
  const refresh = newRefreshToken();
  await storeRefreshToken(db, hmacKey, grantId, refresh);
  return refresh;
}

export async function grantTokens(
  deps: Pick<Deps, 'signingKeys'>,
  grant: GrantRow,
  refreshToken: string,
  issuer: string,
): Promise<GrantTokens> {
  const access = await issueAccessToken(deps, grant, issuer);
  return {
    resource: resourceUrl(issuer, grant.resource),
    scope: grant.scope,
    access_token: access.token,
    token_type: 'Bearer',
    expires_in: access.expiresIn,
    refresh_token: refreshToken,
  };
}
