import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { randomToken } from '../ids.js';
import { releaseExpiredHolds } from '../billing/spend.js';
import type { Logger } from '../log.js';

// Which svc processes are alive, so that what a dead one took comes back within seconds (issue 14,
// items 2 and 5). Each process has a random tag, stamped on everything it takes: the first segment of its
// lease ids (`<tag>.<random>`, src/models/concurrency.ts) and the 8 characters after `req_` of its calls'
// and spare holds' request ids. It beats (svc_processes.beat_at) every quarter of PROCESS_DEAD_AFTER_MS.
// A beat that finds a peer silent for longer than that declares it dead, in one transaction: its row
// goes, its leases are deleted, and its open holds are expired and released (the tokens come back, as
// at the 15-minute TTL, but now). A hold expired this way still takes its settle if one arrives later (a
// spool the dead process left, src/models/pending-settles.ts): an expired hold's settle debits what the
// allocation can pay (src/billing/spend.ts).
//
// A database outage silences every process at once. So a process declares others dead only after its
// own beats have landed without a gap for PROCESS_DEAD_AFTER_MS: by then every live peer has beaten too.
// A process cut off alone for longer than that is declared dead while it lives: its leases go (the cap
// may be exceeded briefly when it returns) and its holds expire (its settles still debit what the
// allocation can pay); its next beat registers it again.

export const TAG_LENGTH = 8;

export interface Liveness {
  /** This process's tag. */
  readonly tag: string;
  /** A new call's request id, stamped with this process's tag: `req_<tag><128 random bits>`. */
  requestId(): string;
  /** A new lease id, stamped with this process's tag. */
  leaseId(): string;
  /** One beat now (and a reclaim when due); resolves with the tags it declared dead. For tests and start-up. */
  beat(): Promise<string[]>;
  close(): Promise<void>;
}

export function createLiveness(db: Db, options: { deadAfterMs: number; log: Logger }): Liveness {
  const tag = randomToken(5); // 40 bits: 8 base32 characters
  const { deadAfterMs, log } = options;
  const beatMs = Math.max(100, Math.floor(deadAfterMs / 4));
  /** When this process's beats started landing without a gap (null: the last one failed). */
  let streakSince: number | null = null;
  let beating: Promise<string[]> | null = null;
  let closed = false;

  async function beatOnce(): Promise<string[]> {
    try {
      await db.execute(sql`insert into svc_processes (tag) values (${tag})
        on conflict (tag) do update set beat_at = now()`);
    } catch {
      streakSince = null;
      return [];
    }
    streakSince ??= Date.now();
    if (Date.now() - streakSince < deadAfterMs) return [];
    return reclaim().catch((err: unknown) => {
      log.warn({ err }, 'reclaiming what dead processes held failed; next beat tries again');
      return [];
    });
  }

  async function reclaim(): Promise<string[]> {
    const { dead, accounts } = await db.transaction(async (tx) => {
      const t = tx as unknown as Db;
      const gone = await queryRows<{ tag: string }>(
        t,
        sql`delete from svc_processes where beat_at < now() - make_interval(secs => ${deadAfterMs / 1000})
            and tag <> ${tag} returning tag`,
      );
      if (gone.length === 0) return { dead: [] as string[], accounts: [] as string[] };
      const tags = gone.map((g) => g.tag);
      await t.execute(
        sql`delete from concurrency_leases where split_part(lease_id, '.', 1) = any(${sql.param(tags)}::text[])`,
      );
      // Expired now; the release below (or any reserve of the org, or the sweep) gives the tokens back.
      const held = await queryRows<{ account_id: string }>(
        t,
        sql`update billing_holds set expires_at = now() - interval '1 millisecond'
            where status = 'held' and substr(request_id, 5, ${TAG_LENGTH}) = any(${sql.param(tags)}::text[])
            returning account_id`,
      );
      return { dead: tags, accounts: [...new Set(held.map((h) => h.account_id))] };
    });
    let released = 0;
    for (const account of accounts)
      released += await db.transaction((tx) => releaseExpiredHolds(tx as unknown as Db, account));
    if (dead.length > 0) log.warn({ dead, releasedCredits: released }, 'reclaimed what dead processes held');
    return dead;
  }

  const tick = () => {
    if (beating || closed) return;
    beating = beatOnce().finally(() => (beating = null));
  };
  // Registered at once: a process that dies before its first interval must still be found dead.
  tick();
  const timer = setInterval(tick, beatMs);
  timer.unref();

  return {
    tag,
    requestId: () => `req_${tag}${randomToken()}`,
    leaseId: () => `${tag}.${randomToken(12)}`,
    async beat() {
      if (beating) await beating;
      return beatOnce();
    },
    async close() {
      closed = true;
      clearInterval(timer);
      if (beating) await beating;
      // The row stays: what this process could not give back (a hold whose settle went to the spool) is
      // reclaimed by a peer, or by the next start, once the row is stale.
    },
  };
}
