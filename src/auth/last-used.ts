import { inArray } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import type { Logger } from '../log.js';
import { apiTokens } from '../db/schema.js';
import { createBatcher } from '../db/batch.js';

// A token's `last_used_at`, kept to the minute (CONTRACT §6): written at most once a minute per token by
// this process, the stamps due in the same moment in one statement (src/db/batch.ts), off the request's
// path. A chat call admitted in one statement stamps its token there instead
// (src/db/custom/token-admission.sql).

const LAST_USED_WRITE_INTERVAL_MS = 60_000;

export interface LastUsedStamps {
  /** Records a use of the token (a write at most once a minute), without waiting for it. */
  touch(tokenId: number): void;
  /**
   * Resolves once the token's stamp, if one is being written, has been: a read of `last_used_at` that
   * follows (GET /v1/auth/verify) then counts the request that is reading it.
   */
  recorded(tokenId: number): Promise<void> | undefined;
}

export function lastUsedStamps(db: Db, log: Logger): LastUsedStamps {
  const written = new Map<number, number>();
  const writing = new Map<number, Promise<void>>();
  const write = createBatcher<number, null>(async (ids) => {
    await db
      .update(apiTokens)
      .set({ lastUsedAt: new Date() })
      .where(inArray(apiTokens.id, [...new Set(ids)]));
    return ids.map(() => null);
  });
  return {
    touch(tokenId) {
      const now = Date.now();
      if (now - (written.get(tokenId) ?? 0) < LAST_USED_WRITE_INTERVAL_MS) return;
      written.set(tokenId, now);
      if (written.size > 10_000) written.clear();
      const stamp = write(tokenId).then(
        () => undefined,
        (err: unknown) => log.warn({ err }, 'could not record token use'),
      );
      writing.set(tokenId, stamp);
      void stamp.finally(() => {
        if (writing.get(tokenId) === stamp) writing.delete(tokenId);
      });
    },
    recorded: (tokenId) => writing.get(tokenId),
  };
}
