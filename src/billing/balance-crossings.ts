import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import type { Logger } from '../log.js';
import { transaction } from '../db/transaction.js';

// "The balance of org X crossed below threshold T in this transaction".
//
// A consumer (the low-balance alert, auto top-up) watches a threshold of an org under a purpose of its own
// (setBalanceWatch). The database records every crossing of it, in the transaction that moved the balance,
// as a row of the durable outbox balance_crossings (src/db/custom/balance-crossings.sql): once per
// crossing, under any number of concurrent calls and processes, and again after a top-up lifted the
// balance back to the threshold or above. The consumer then handles each crossing exactly once
// (handleCrossings: claimed with FOR UPDATE SKIP LOCKED, marked handled in the transaction of its effect).
// The model path pays one comparison per settle; only a crossing writes a row.

/** Names the purposes this tree uses; a consumer may add its own. */
export const WATCH_ALERT_LOW = 'alert.low';
export const WATCH_ALERT_EXHAUSTED = 'alert.exhausted';

export interface BalanceCrossing {
  id: number;
  orgKey: string;
  purpose: string;
  /** The org balance went from ≥ threshold (balanceBefore) to < threshold (balanceAfter). */
  threshold: number;
  balanceBefore: number;
  balanceAfter: number;
  createdAt: Date;
}

/**
 * Watches org `orgKey`'s balance for falls below `threshold` tokens on behalf of `purpose`; null stops
 * watching. Runs in the caller's transaction; touches the org's account row (the watched thresholds are
 * copied there by a trigger), so call it outside a transaction that holds other account locks, or after
 * them in ascending order. A balance already below the threshold is not a crossing: the next one comes
 * when it falls below after being at or above it.
 */
export async function setBalanceWatch(
  db: Db,
  orgKey: string,
  purpose: string,
  threshold: number | null,
): Promise<void> {
  if (threshold === null) {
    await db.execute(sql`delete from balance_watches where org_key = ${orgKey} and purpose = ${purpose}`);
    return;
  }
  if (!Number.isSafeInteger(threshold) || threshold < 0)
    throw new Error('threshold must be a whole number ≥ 0');
  await db.execute(
    sql`insert into balance_watches (org_key, purpose, threshold) values (${orgKey}, ${purpose}, ${threshold})
        on conflict (org_key, purpose) do update set threshold = excluded.threshold, updated_at = now()
        where balance_watches.threshold is distinct from excluded.threshold`,
  );
}

/** The threshold `purpose` watches on org `orgKey`, or null. */
export async function balanceWatch(db: Db, orgKey: string, purpose: string): Promise<number | null> {
  const [row] = await queryRows<{ threshold: unknown }>(
    db,
    sql`select threshold from balance_watches where org_key = ${orgKey} and purpose = ${purpose}`,
  );
  return row ? Number(row.threshold) : null;
}

interface CrossingRow {
  id: unknown;
  org_key: string;
  purpose: string;
  threshold: unknown;
  balance_before: unknown;
  balance_after: unknown;
  created_at: Date | string;
}

const toCrossing = (r: CrossingRow): BalanceCrossing => ({
  id: Number(r.id),
  orgKey: r.org_key,
  purpose: r.purpose,
  threshold: Number(r.threshold),
  balanceBefore: Number(r.balance_before),
  balanceAfter: Number(r.balance_after),
  createdAt: new Date(r.created_at),
});

/**
 * Handles one crossing inside `tx`. It may return a step to run once `tx` has committed (a mail, a call to
 * the processor): that step runs at most once, and is lost if the process dies between the two.
 */
export type CrossingHandler = (tx: Db, crossing: BalanceCrossing) => Promise<void | (() => Promise<void>)>;

/**
 * Handles the unhandled crossings of `purposes`, oldest first, at most `limit`: each in a transaction of its
 * own that claims the row (FOR UPDATE SKIP LOCKED: another process handling it at the moment is skipped,
 * not waited for), runs `handle(tx, crossing)` and marks the row handled. A handler that throws rolls its
 * own effect back with it, and the crossing is tried again on a later pass; so the handler's effect
 * happens exactly once when it is written in `tx` (an outbox row). An effect outside the database (a mail
 * over SMTP, a processor call) is the handler's after-commit step; a processor call keyed by the crossing
 * id can instead be made inside, where a failure rolls back and retries it (at least once).
 * Returns how many were handled.
 */
export async function handleCrossings(
  db: Db,
  purposes: readonly string[],
  handle: CrossingHandler,
  limit = 50,
  onFailure?: (err: unknown) => void,
): Promise<number> {
  let handled = 0;
  let after = 0;
  for (let n = 0; n < limit; n++) {
    let claimed = false;
    // Set inside the transaction's callback (so TypeScript's narrowing cannot see it: read through a cast).
    let afterCommit = null as (() => Promise<void>) | null;
    const found = await transaction(db, async (t) => {
      const [row] = await queryRows<CrossingRow>(
        t,
        sql`select id, org_key, purpose, threshold, balance_before, balance_after, created_at
            from balance_crossings
            where purpose = any(${sql.param([...purposes])}::text[]) and handled_at is null and id > ${after}
            order by id limit 1 for update skip locked`,
      );
      if (!row) return false;
      const crossing = toCrossing(row);
      after = crossing.id;
      claimed = true;
      afterCommit = (await handle(t, crossing)) ?? null;
      await t.execute(sql`update balance_crossings set handled_at = now() where id = ${crossing.id}`);
      return true;
    }).catch((err: unknown) => {
      // A handler's failure leaves its crossing for a later pass, and this pass moves past it; any other
      // failure (the database) ends the pass.
      if (!claimed) throw err;
      onFailure?.(err);
      return 'failed' as const;
    });
    if (found === false) break;
    if (found === true) {
      handled++;
      if (afterCommit) await afterCommit().catch((err: unknown) => onFailure?.(err));
    }
  }
  return handled;
}

/**
 * Runs handleCrossings every `intervalMs` until `onClose` (one pass at a time per process; several
 * processes share the rows through SKIP LOCKED). `kick()` runs a pass now (after a known crossing).
 */
export function startCrossingWorker(parts: {
  db: Db;
  log: Logger;
  name: string;
  purposes: readonly string[];
  handle: CrossingHandler;
  intervalMs: number;
  onClose(fn: () => Promise<void> | void): void;
}): { kick(): void } {
  let running: Promise<void> | null = null;
  let closed = false;
  const pass = () => {
    if (running || closed) return;
    running = handleCrossings(parts.db, parts.purposes, parts.handle, 50, (err) =>
      parts.log.warn({ err, worker: parts.name }, 'balance crossing not handled; tried again later'),
    )
      .then(() => undefined)
      .catch((err: unknown) => parts.log.warn({ err, worker: parts.name }, 'balance crossing pass failed'))
      .finally(() => {
        running = null;
      });
  };
  const timer = setInterval(pass, parts.intervalMs);
  timer.unref();
  parts.onClose(async () => {
    closed = true;
    clearInterval(timer);
    await running;
  });
  return { kick: pass };
}
