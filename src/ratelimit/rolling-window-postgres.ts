import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import type { Logger } from '../log.js';
import { WINDOW_MS, type RollingWindows, type WindowAdmission, type WindowCount } from './rolling-window.js';

// The rolling windows in the database (PostgreSQL, or PGlite for one process): svc_rate_admit
// (src/db/custom/rate-windows.sql) decides a call against all its windows in one statement, under the
// windows' advisory locks, so two processes never both take the last of a window. The clock is the
// database's, one for every process.

/** Entries that left the window are deleted by the next admission of their key; this sweeps the others. */
const SWEEP_MS = WINDOW_MS;

interface AdmitRow {
  ord: number;
  used: string | number;
  reset_ms: number;
  retry_ms: number | null;
  entry_id: string | number | null;
}

export function createPostgresWindows(db: Db, log: Logger): RollingWindows {
  let sweeper: NodeJS.Timeout | undefined;
  const sweep = () =>
    queryRows(db, sql`select svc_rate_sweep(${WINDOW_MS}::int)`).catch((err: unknown) =>
      log.warn({ err }, 'could not sweep the rate-limit windows'),
    );

  return {
    async admit(counts: WindowCount[]): Promise<WindowAdmission> {
      if (!sweeper) {
        sweeper = setInterval(() => void sweep(), SWEEP_MS);
        sweeper.unref();
      }
      const rows = await queryRows<AdmitRow>(
        db,
        sql`select ord, used, reset_ms, retry_ms, entry_id from svc_rate_admit(
              ${sql.param(counts.map((c) => c.key))}::text[], ${sql.param(counts.map((c) => c.limit))}::int[],
              ${sql.param(counts.map((c) => c.amount))}::int[], ${WINDOW_MS}::int)`,
      );
      rows.sort((a, b) => Number(a.ord) - Number(b.ord));
      const admitted = rows.length > 0 && rows.every((r) => r.entry_id !== null);
      return {
        admitted,
        states: rows.map((r) => ({
          used: Number(r.used),
          resetMs: Number(r.reset_ms),
          retryMs: r.retry_ms === null ? null : Number(r.retry_ms),
        })),
        entries: admitted
          ? rows.map((r, i) => ({ key: counts[i]!.key, id: String(r.entry_id), amount: counts[i]!.amount }))
          : [],
      };
    },
    async correct(entry, amount) {
      await queryRows(db, sql`select svc_rate_correct(${entry.id}::bigint, ${amount}::int)`);
    },
    close() {
      clearInterval(sweeper);
    },
  };
}
