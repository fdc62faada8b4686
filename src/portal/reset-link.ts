import { and, eq, gt, isNull } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { accountTokens } from '../db/schema.js';
import { hmacSecret } from '../crypto/hash.js';

// Whether a password-reset link can still be redeemed (unused, unexpired), read without spending it, so
// the page that opens it says "used or expired" at once instead of after a new password was typed. The
// redemption itself stays the one guarded UPDATE of src/accounts/one-time-tokens.ts.

export async function resetLinkIsLive(deps: Pick<Deps, 'db' | 'keys'>, token: string): Promise<boolean> {
  const [row] = await deps.db
    .select({ userId: accountTokens.userId })
    .from(accountTokens)
    .where(
      and(
        eq(accountTokens.tokenHash, hmacSecret(deps.keys.hmac, token)),
        eq(accountTokens.purpose, 'reset_password'),
        isNull(accountTokens.usedAt),
        gt(accountTokens.expiresAt, new Date()),
      ),
    )
    .limit(1);
  return row !== undefined;
}
