import { randomBytes } from 'node:crypto';
import { and, eq, gt, isNull, lt } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { accountTokens } from '../db/schema.js';
import { hmacSecret } from '../crypto/hash.js';

// Single-use tokens sent by e-mail (CONTRACT §4): verification 24 h, reset 1 h. The mail carries the
// plaintext; the database keeps its HMAC only. Redemption is one guarded UPDATE, so of two racing
// redemptions exactly one gets the row (STYLE: state that must not race).

export type TokenPurpose = 'verify_email' | 'reset_password';

export const TOKEN_TTL_SECONDS: Record<TokenPurpose, number> = {
  verify_email: 24 * 60 * 60,
  reset_password: 60 * 60,
};

/** 32 random bytes, base64url: what goes into the link. */
export async function issueOneTimeToken(
  db: Db,
  hmacKey: Buffer,
  userId: string,
  purpose: TokenPurpose,
): Promise<string> {
  const token = randomBytes(32).toString('base64url');
  // Rows of this user that expired a day ago are of no use to anyone: sweep them here, so the table
  // stays bounded without a timer.
  await db
    .delete(accountTokens)
    .where(
      and(
        eq(accountTokens.userId, userId),
        lt(accountTokens.expiresAt, new Date(Date.now() - 24 * 3600 * 1000)),
      ),
    );
  await db.insert(accountTokens).values({
    userId,
    purpose,
    tokenHash: hmacSecret(hmacKey, token),
    expiresAt: new Date(Date.now() + TOKEN_TTL_SECONDS[purpose] * 1000),
  });
  return token;
}

/** Marks the token used and returns its user, or null when it is unknown, used, expired or of another purpose. */
export async function redeemOneTimeToken(
  db: Db,
  hmacKey: Buffer,
  token: string,
  purpose: TokenPurpose,
): Promise<string | null> {
  const [row] = await db
    .update(accountTokens)
    .set({ usedAt: new Date() })
    .where(
      and(
        eq(accountTokens.tokenHash, hmacSecret(hmacKey, token)),
        eq(accountTokens.purpose, purpose),
        isNull(accountTokens.usedAt),
        gt(accountTokens.expiresAt, new Date()),
      ),
    )
    .returning({ userId: accountTokens.userId });
  return row?.userId ?? null;
}

/** Retires every outstanding token of a purpose (a completed reset voids the other reset links). */
export async function retireOneTimeTokens(db: Db, userId: string, purpose: TokenPurpose): Promise<void> {
  await db
    .update(accountTokens)
    .set({ usedAt: new Date() })
    .where(
      and(eq(accountTokens.userId, userId), eq(accountTokens.purpose, purpose), isNull(accountTokens.usedAt)),
    );
}
