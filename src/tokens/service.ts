import { and, eq, isNull } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { apiTokens } from '../db/schema.js';
import { hmacSecret } from '../crypto/hash.js';
import { generateApiTokenSecret, tokenPrefixOf } from '../auth/api-token-secret.js';

export type ApiTokenRow = typeof apiTokens.$inferSelect;

/**
 * Mints a credential for (org, user). Any previous active one of that pair is revoked in the same
 * transaction (CONTRACT §6); the partial unique index makes a racing second mint fail rather than
 * leave two active, and the loser retries once against the winner's row.
 */
export async function mintApiToken(
  db: Db,
  hmacKey: Buffer,
  input: { userId: string; orgKey: string; tokenName: string },
): Promise<{ row: ApiTokenRow; secret: string }> {
  const secret = generateApiTokenSecret();
  const attempt = () =>
    db.transaction(async (tx) => {
      await tx
        .update(apiTokens)
        .set({ revokedAt: new Date() })
        .where(and(eq(apiTokens.orgId, input.orgKey), eq(apiTokens.userId, input.userId), isNull(apiTokens.revokedAt)));
      const [row] = await tx
        .insert(apiTokens)
        .values({
          userId: input.userId,
          orgId: input.orgKey,
          tokenName: input.tokenName,
          tokenHash: hmacSecret(hmacKey, secret),
          tokenPrefix: tokenPrefixOf(secret),
        })
        .returning();
      return row!;
    });
  for (let tries = 0; ; tries++) {
    try {
      return { row: await attempt(), secret };
    } catch (err) {
      if ((err as { code?: string }).code !== '23505' || tries >= 3) throw err;
    }
  }
}
