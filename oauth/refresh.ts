import { eq, sql } from 'drizzle-orm';
import type { Deps } from '../src/deps.js';
import { oauthGrants, oauthRefreshTokens } from '../src/db/schema.js';
import { hmacSecret } from '../src/crypto/hash.js';
import { REFRESH_TOKEN_TTL_SECONDS, revokeGrants, successorOf, type GrantRow } from './grants.js';

// Refresh-token families (CONTRACT §7; RFC 9700 §4.14.2): one family per grant, rotation on every use,
// and reuse of a rotated token revokes the grant. Two refreshes with the same token racing each other
// (a client retrying, two tabs) must not lock the user out, so a token rotated less than
// REUSE_GRACE_SECONDS ago, whose successor has not itself been used, is answered with that same
// successor (derived deterministically: grants.ts successorOf) instead of being treated as theft.

export const REUSE_GRACE_SECONDS = 10;

export type RefreshLookup =
  { kind: 'ok'; grant: GrantRow; expiresAt: Date; tokenHash: string } | { kind: 'invalid' };

/** Finds a presented refresh token; detects reuse (and then revokes the grant). */
export async function lookupRefreshToken(deps: Deps, token: string, issuer: string): Promise<RefreshLookup> {
  const tokenHash = hmacSecret(deps.keys.hmac, token);
  const [row] = await deps.db
    .select({ rt: oauthRefreshTokens, grant: oauthGrants })
    .from(oauthRefreshTokens)
    .innerJoin(oauthGrants, eq(oauthGrants.id, oauthRefreshTokens.grantId))
    .where(eq(oauthRefreshTokens.tokenHash, tokenHash));
  if (!row || row.grant.revokedAt || row.rt.expiresAt <= new Date()) return { kind: 'invalid' };
  // A grant answers only to the issuer that granted it (mix-up defence: RFC 9700 §4.4).
  if (row.grant.issuer !== issuer) return { kind: 'invalid' };
  if (row.rt.rotatedAt && !(await withinGrace(deps, token, row.rt.rotatedAt))) {
    await revokeGrants(deps.db, [row.grant.id]);
    return { kind: 'invalid' };
  }
  return { kind: 'ok', grant: row.grant, expiresAt: row.rt.expiresAt, tokenHash };
}

async function withinGrace(deps: Deps, token: string, rotatedAt: Date): Promise<boolean> {
  if (Date.now() - rotatedAt.getTime() > REUSE_GRACE_SECONDS * 1000) return false;
  const [successor] = await deps.db
    .select({ rotatedAt: oauthRefreshTokens.rotatedAt })
    .from(oauthRefreshTokens)
    .where(eq(oauthRefreshTokens.tokenHash, hmacSecret(deps.keys.hmac, successorOf(deps.keys.hmac, token))));
  // The successor already moved on: the old token coming back now is a replay, not a race.
  return !successor || successor.rotatedAt === null;
}

/**
 * Rotates: marks the token used (one guarded UPDATE) and stores its successor. Losing the race to a
 * parallel refresh of the same token is fine — both return the same successor.
 */
export async function rotateRefreshToken(deps: Deps, token: string, grantId: string): Promise<string> {
  const tokenHash = hmacSecret(deps.keys.hmac, token);
  const successor = successorOf(deps.keys.hmac, token);
  // One statement, one round trip: mark the presented token rotated (only if it is not yet) and store
  // its successor (a no-op when a parallel refresh stored it first).
  await deps.db.execute(sql`
    with rotated as (
      update oauth_refresh_tokens set rotated_at = now() where token_hash = ${tokenHash} and rotated_at is null
    )
    insert into oauth_refresh_tokens (token_hash, grant_id, expires_at)
    values (${hmacSecret(deps.keys.hmac, successor)}, ${grantId}, ${new Date(Date.now() + REFRESH_TOKEN_TTL_SECONDS * 1000).toISOString()})
    on conflict do nothing`);
  return successor;
}
