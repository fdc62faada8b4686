import { sql } from 'drizzle-orm';
import { namedRows, queryRows, type Db } from '../db/client.js';
import { createBatcher } from '../db/batch.js';
import type { Logger } from '../log.js';
import { WINDOW_MS, type RollingWindows, type WindowAdmission, type WindowCount } from './rolling-window.js';

// The rolling windows in the database (PostgreSQL, or PGlite for one process): svc_rate_admit_many
// (src/db/custom/window-batches.sql) decides each call against all its windows, the calls in flight in
// this process in one statement, under the windows' advisory locks, so two processes never both take the
// last of a window. The clock is the database's, one for every process.

/** Entries that left the window are deleted by the next admission of their key; this sweeps the others. */
const SWEEP_MS = WINDOW_MS;

// Named statements (src/db/client.ts namedRows), each serving every call in flight in this process
// (src/db/batch.ts; decision 0173): a call's counts are adjacent inputs numbered by `call`.
const ADMIT = `select ord, used, reset_ms, retry_ms, entry_id
  from svc_rate_admit_many($1::int[], $2::text[], $3::int[], $4::int[], $5::int)`;
const CORRECT = 'select svc_rate_correct_many($1::text[], $2::bigint[], $3::int[])';

interface AdmitRow {
  ord: number;
  used: string | number;
  reset_ms: number;
  retry_ms: number | null;
  entry_id: string | number | null;
}

/** One batch of calls' counts, admitted in one statement: each call's own admission, in input order. */
async function admitMany(db: Db, calls: WindowCount[][]): Promise<WindowAdmission[]> {
  const counts = calls.flatMap((counts, i) => counts.map((count) => ({ call: i + 1, count })));
  const rows = await namedRows<AdmitRow>(db, 'svc_rate_admit_many', ADMIT, [
    counts.map((c) => c.call),
    counts.map((c) => c.count.key),
    counts.map((c) => c.count.limit),
    counts.map((c) => c.count.amount),
    WINDOW_MS,
  ]);
  const byInput = new Map(rows.map((r) => [Number(r.ord), r]));
  let at = 0;
  return calls.map((callCounts) => {
    const mine = callCounts.map(() => {
      const row = byInput.get(++at);
      if (!row) throw new Error('the rate-limit admission returned too few rows');
      return row;
    });
    const admitted = mine.length > 0 && mine.every((r) => r.entry_id !== null);
    return {
      admitted,
      states: mine.map((r) => ({
        used: Number(r.used),
        resetMs: Number(r.reset_ms),
        retryMs: r.retry_ms === null ? null : Number(r.retry_ms),
      })),
      entries: admitted
        ? mine.map((r, i) => ({
            key: callCounts[i]!.key,
            id: String(r.entry_id),
            amount: callCounts[i]!.amount,
          }))
        : [],
    };
  });
}

export function createPostgresWindows(db: Db, log: Logger): RollingWindows {
  let sweeper: NodeJS.Timeout | undefined;
  const sweep = () =>
    queryRows(db, sql`select svc_rate_sweep(${WINDOW_MS}::int)`).catch((err: unknown) =>
      log.warn({ err }, 'could not sweep the rate-limit windows'),
    );
  // One batch at a time each way: a batch waits for the keys' locks anyway, and the calls arriving
  // meanwhile join the next one.
  const admit = createBatcher<WindowCount[], WindowAdmission>((calls) => admitMany(db, calls), {
    isolateFailures: true,
  });
  const correct = createBatcher<{ key: string; id: string; amount: number }, null>(
    async (entries) => {
      await namedRows(db, 'svc_rate_correct_many', CORRECT, [
        entries.map((e) => e.key),
        entries.map((e) => e.id),
        entries.map((e) => e.amount),
      ]);
      return entries.map(() => null);
    },
    { isolateFailures: true },
  );

  return {
    admit(counts) {
      if (!sweeper) {
        sweeper = setInterval(() => void sweep(), SWEEP_MS);
        sweeper.unref();
      }
      return admit(counts);
    },
    async correct(entry, amount) {
      await correct({ key: entry.key, id: entry.id, amount });
    },
    close() {
      clearInterval(sweeper);
    },
  };
}
