import { randomBytes } from 'node:crypto';
import { and, eq, isNull } from 'drizzle-orm';
import type { Db } from '../src/db/client.js';
import { oauthCodes, type OAuthResource } from '../src/db/schema.js';
import { hmacSecret } from '../src/crypto/hash.js';
import { revokeGrants } from './grants.js';
import type { AuditOrigin } from '../src/audit/context.js';

// Authorization codes (CONTRACT §7): 60 s, single use, stored as HMAC. Redemption is one guarded
// UPDATE … WHERE used_at IS NULL (STYLE: state that must not race); a second presentation of a used
// code revokes the grants the first one produced (RFC 6749 §4.1.2, RFC 9700 §4.5).

export const CODE_TTL_SECONDS = 60;

export type CodeRow = typeof oauthCodes.$inferSelect;

export const hashCode = (hmacKey: Buffer, code: string): string => hmacSecret(hmacKey, `oauth_code:${code}`);

export interface NewCode {
  clientId: string;
  userId: string;
  orgKey: string;
  redirectUri: string;
  codeChallenge: string;
  resources: OAuthResource[];
  issuer: string;
  /** "All my organizations" ticked on the consent page (the grants' allOrgs). */
  allOrgs: boolean;
  /** What the approval grants, one scope per resource (oauth/params.ts approvalScope). */
  scope: string;
}

export async function createCode(db: Db, hmacKey: Buffer, input: NewCode): Promise<string> {
  const code = randomBytes(32).toString('base64url');
  await db.insert(oauthCodes).values({
    codeHash: hashCode(hmacKey, code),
    clientId: input.clientId,
    userId: input.userId,
    org: input.orgKey,
    redirectUri: input.redirectUri,
    codeChallenge: input.codeChallenge,
    resources: input.resources,
    issuer: input.issuer,
    allOrgs: input.allOrgs,
    scope: input.scope,
    expiresAt: new Date(Date.now() + CODE_TTL_SECONDS * 1000),
  });
  return code;
}

export async function findCode(db: Db, codeHash: string): Promise<CodeRow | null> {
  const [row] = await db.select().from(oauthCodes).where(eq(oauthCodes.codeHash, codeHash));
  return row ?? null;
}

/** Marks the code used; false when somebody else already did (the loser of a race, or a replay). */
export async function consumeCode(db: Db, codeHash: string): Promise<boolean> {
  const rows = await db
    .update(oauthCodes)
    .set({ usedAt: new Date() })
    .where(and(eq(oauthCodes.codeHash, codeHash), isNull(oauthCodes.usedAt)))
    .returning({ codeHash: oauthCodes.codeHash });
  return rows.length === 1;
}

/**
 * Records what the code issued, inside the issuing transaction. If a replay was seen meanwhile (the
 * marker below), it refuses, which rolls the issuance back: a code presented twice yields no tokens.
 */
export async function recordIssuedGrants(db: Db, codeHash: string, grantIds: string[]): Promise<boolean> {
  const rows = await db
    .update(oauthCodes)
    .set({ grantIds })
    .where(and(eq(oauthCodes.codeHash, codeHash), isNull(oauthCodes.grantIds)))
    .returning({ codeHash: oauthCodes.codeHash });
  return rows.length === 1;
}

/**
 * A used code came back (RFC 6749 §4.1.2: deny, and revoke what it issued). If the first exchange has
 * not recorded its grants yet (the two raced), an empty list marks the code replayed, which makes that
 * exchange roll back; otherwise the grants it issued are revoked.
 */
export async function revokeReplayedCode(db: Db, codeHash: string, auditOrigin: AuditOrigin): Promise<void> {
  const marked = await db
    .update(oauthCodes)
    .set({ grantIds: [] })
    .where(and(eq(oauthCodes.codeHash, codeHash), isNull(oauthCodes.grantIds)))
    .returning({ codeHash: oauthCodes.codeHash });
  if (marked.length === 1) return;
  const row = await findCode(db, codeHash);
  await revokeGrants(db, row?.grantIds ?? [], 'code_replayed', auditOrigin);
}
