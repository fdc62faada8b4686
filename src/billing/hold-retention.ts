import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';

// Retention of closed holds (docs/scale.md). A hold is read while its call is in flight
// (reserve, settle, void, the expiry sweep) and by reconciliation; once closed (settled, voided, expired)
// no hot path reads it again: its call's money is in the ledger and its record in usage_records. Closed
// holds are kept HOLD_RETENTION_DAYS (long enough for a late settle replay, a support question and a
// month's reconciliations), then deleted by `npm run billing:reconcile`, so the table holds about a
// month of calls instead of every call ever made.

export const HOLD_RETENTION_DAYS = 35;
const BATCH = 10_000;

/** Deletes holds closed more than `days` ago, in batches; returns how many. */
export async function pruneClosedHolds(db: Db, days = HOLD_RETENTION_DAYS): Promise<number> {
  let total = 0;
  for (;;) {
    const rows = await queryRows<{ n: unknown }>(
      db,
      sql`with gone as (
            delete from billing_holds where request_id in (
              select request_id from billing_holds
              where status <> 'held' and closed_at < now() - make_interval(days => ${days}) limit ${BATCH})
            returning 1)
          select count(*) as n from gone`,
    );
    const n = Number(rows[0]?.n ?? 0);
    total += n;
    if (n < BATCH) return total;
  }
}
