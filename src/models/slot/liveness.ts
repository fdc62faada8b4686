import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../../db/client.js';
import { randomToken } from '../../ids.js';
import { releaseExpiredHolds } from '../../billing/spend.js';
import type { Logger } from '../../log.js';
import { transaction } from '../../db/transaction.js';

// Which svc processes are alive, so that what a dead one took comes back within seconds
// (docs/operations.md). Each process has a random tag, stamped on everything it takes: the first segment of its
// lease ids (`<tag>.<random>`, src/models/slot/concurrency.ts) and the 8 characters after `req_` of its calls'
// and spare holds' request ids. It beats (svc_processes.beat_at) every quarter of PROCESS_DEAD_AFTER_MS.
// A beat that finds a peer silent for longer than that declares it dead, in one transaction: its row
// goes, its leases are deleted, and its open holds are expired and released (the tokens come back, as
// at the 15-minute TTL, but now). A hold expired this way still takes its settle if one arrives later (a
// spool the dead process left, src/models/metering/pending-settles.ts): an expired hold's settle debits what the
// allocation can pay (src/billing/spend.ts).
//
// A database outage silences every process at once. So a process declares others dead only after its
// own beats have landed without a gap for PROCESS_DEAD_AFTER_MS: by then every live peer has beaten too.
//
// A process cut off alone cannot tell that from an outage, and its peers cannot tell it from a crash:
// after PROCESS_DEAD_AFTER_MS they take its slots and its holds' tokens. So it fences itself, by its own
// clock, measured from when it *sent* its last beat that landed (the row's beat_at is no earlier): silent
// for FENCE_AT of the limit, it admits no new call (fenced(): 503 with Retry-After, src/models/slot/lease.ts);
// silent for REVOKE_AT of the limit, it ends its calls in flight (onRevoke: their leases' signals fire,
// src/models/slot/concurrency.ts), before any peer may count their slots free. A beat that lands again
// lifts the fence. One that finds its row gone (a peer declared it dead meanwhile: the upsert inserted)
// revokes too: whatever it held then was reclaimed, and must not be used or released as its own.

export const TAG_LENGTH = 8;
/** Silent this share of PROCESS_DEAD_AFTER_MS, a process admits no new call. */
export const FENCE_AT = 0.5;
/** Silent this share, it ends its calls in flight: their slots are about to be counted free by its peers. */
export const REVOKE_AT = 0.75;

export interface Liveness {
  /** This process's tag. */
  readonly tag: string;
  /** A new call's request id, stamped with this process's tag: `req_<tag><128 random bits>`. */
  requestId(): string;
  /** A new lease id, stamped with this process's tag. */
  leaseId(): string;
  /**
   * True while this process's last beat that landed is older than FENCE_AT of the limit: admit nothing.
   * The first such answer of a fence is logged.
   */
  fenced(): boolean;
  /** One beat now (and a reclaim when due); resolves with the tags it declared dead. For tests and start-up. */
  beat(): Promise<string[]>;
  close(): Promise<void>;
}

export interface LivenessOptions {
  deadAfterMs: number;
  log: Logger;
  /**
   * Ends this process's calls in flight (the limiter revokes its leases): see the header. Without it the
   * process does not fence itself at all (an embedded database has no peers).
   */
  onRevoke?: () => void;
}

export function createLiveness(db: Db, options: LivenessOptions): Liveness {
  const tag = randomToken(5); // 40 bits: 8 base32 characters
  const { deadAfterMs, log } = options;
  const beatMs = Math.max(100, Math.floor(deadAfterMs / 4));
  /** When this process's beats started landing without a gap (null: the last one failed). */
  let streakSince: number | null = null;
  let beating: Promise<string[]> | null = null;
  let closed = false;
  /** performance.now() when the last beat that landed was sent (null: none yet, not fenced before the first). */
  let landedSentAt: number | null = null;
  let registered = false;
  /** The fence is up and was logged: the next beat that lands logs that it is down. */
  let fenceLogged = false;
  let revokeTimer: NodeJS.Timeout | null = null;
  const fencing = options.onRevoke !== undefined;

  function revoke(why: string) {
    log.warn({ tag, why }, 'ending calls in flight: this process may be declared dead by its peers');
    options.onRevoke?.();
  }

  /** Re-armed at every beat that lands: fires once the silence since its sending reaches REVOKE_AT. */
  function armRevoke(sentAt: number) {
    if (revokeTimer) clearTimeout(revokeTimer);
    const due = sentAt + deadAfterMs * REVOKE_AT - performance.now();
    revokeTimer = setTimeout(
      () => {
        revokeTimer = null;
        if (!closed) revoke(`no beat landed for ${Math.round(deadAfterMs * REVOKE_AT)} ms`);
      },
      Math.max(0, due),
    );
    revokeTimer.unref();
  }

  async function beatOnce(): Promise<string[]> {
    const sentAt = performance.now();
    let inserted: boolean;
    try {
      const [row] = await queryRows<{ inserted: boolean }>(
        db,
        sql`insert into svc_processes (tag) values (${tag})
            on conflict (tag) do update set beat_at = now() returning (xmax = 0) as inserted`,
      );
      inserted = row?.inserted === true;
    } catch {
      streakSince = null;
      return [];
    }
    if (landedSentAt === null || sentAt > landedSentAt) landedSentAt = sentAt;
    if (fencing) armRevoke(landedSentAt);
    if (fenceLogged) {
      fenceLogged = false;
      log.info({ tag }, 'a heartbeat landed: admitting calls again');
    }
    // Its row was gone: a peer declared this process dead and reclaimed what it held (see the header).
    if (inserted && registered && fencing) revoke('a peer declared this process dead');
    registered = true;
    streakSince ??= Date.now();
    if (Date.now() - streakSince < deadAfterMs) return [];
    return reclaim().catch((err: unknown) => {
      log.warn({ err }, 'reclaiming what dead processes held failed; next beat tries again');
      return [];
    });
  }

  async function reclaim(): Promise<string[]> {
    const { dead, accounts } = await transaction(db, async (t) => {
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
      released += await transaction(db, (tx) => releaseExpiredHolds(tx, account));
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
    fenced() {
      const silentMs = landedSentAt === null ? 0 : performance.now() - landedSentAt;
      const fenced = fencing && silentMs > deadAfterMs * FENCE_AT;
      // Logged once a fence, at the first call it refuses: that call's 503 DATABASE_UNAVAILABLE alone does
      // not say why, with the database up for every other process.
      if (fenced && !fenceLogged) {
        fenceLogged = true;
        log.warn(
          { tag, silentMs: Math.round(silentMs) },
          'admitting no calls: no heartbeat has landed for a while',
        );
      }
      return fenced;
    },
    leaseId: () => `${tag}.${randomToken(12)}`,
    async beat() {
      if (beating) await beating;
      return beatOnce();
    },
    async close() {
      closed = true;
      clearInterval(timer);
      if (revokeTimer) clearTimeout(revokeTimer);
      if (beating) await beating;
      // The row stays: what this process could not give back (a hold whose settle went to the spool) is
      // reclaimed by a peer, or by the next start, once the row is stale.
    },
  };
}
