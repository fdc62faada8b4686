import { randomInt } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { CHECKS, type Violation } from './invariants.js';
import { HOLD_RETENTION_DAYS } from './hold-retention.js';
import { rollupChecksums, rollupDiffersFull } from './usage-rollup-check.js';
import {
  ACCOUNT_CHECKS,
  BALANCE_CHECK,
  checkAccounts,
  freshSeed,
  inSnapshot,
  oldTransactionOpen,
  rowTerm,
  safeHorizon,
  SETTLE_WINDOW_SECONDS,
  writeCheckpoint,
  type Checkpoint,
} from './reconcile-checkpoint.js';

// The full check (docs/scale.md "Reconciliation that grows with new rows"): every invariant of
// invariants.ts over the whole ledger, finding what its queries find, in fewer passes over the big
// tables, in one REPEATABLE READ snapshot that also stores the checkpoint when nothing is wrong:
//
// - balances: the checkpoint's own pass over the ledger (Σ amount × (w(to) − w(from)) under a seed drawn
//   now) against the account pass's Σ w(a) × balance(a), which also answers the four account checks. Only
//   when the two differ does the per-account query run, to name the accounts. The seed is drawn after any
//   wrong balance was made, so one wrong balance is always found and several cancel by a chance of about
//   2^-63 (docs/scale.md, "The balances' checksum"). Grouping the ledger by account twice, sorted or
//   hashed, was the run's largest statement;
// - holds and usage rows: "settled hold differs from its usage row" and "usage row without a settled
//   hold" in one hash full join of the holds with the usage rows (two passes and a million index
//   lookups before);
// - refund and dispute rows: one pass over the refund rows for both checks;
// - the usage rollup: Σ w(key) × (k · sums) over the rollup rows against the same over the records
//   (usage-rollup-check.ts rollupChecksums), w the key hashed under the seed and k random multipliers
//   drawn now, one per summed column; the row-by-row comparison runs only when the two differ, to name
//   the rows. A wrong rollup row goes unnoticed only if k happens to be orthogonal to its error (a chance
//   of about 2^-47, the multipliers' range) or several cancel as wrong balances would.
//
// Every other check runs as it is. The transaction keeps the server's own work_mem and JIT settings: more
// memory made the holds' hash join slower, not faster, and JIT changed nothing measurable (decision
// 0151).

const HOLDS = 'settled hold differs from its usage row';
const USAGE = 'usage row without a settled hold';
const REFUND_ROWS = 'refund row without an applied refund';
const ROLLUP = 'usage rollup differs from its usage records';
const DISPUTE_ROWS = 'dispute row without its dispute';

/** The checks answered here in another form than their invariants.ts query (the rest run as they are). */
const REWRITTEN: string[] = [
  ...ACCOUNT_CHECKS,
  BALANCE_CHECK,
  HOLDS,
  USAGE,
  REFUND_ROWS,
  DISPUTE_ROWS,
  ROLLUP,
];

/**
 * Each hold against the usage row keyed by its request id, and each usage row against the settled hold
 * its key names, in one hash full join. Columns as the two invariants.ts queries return them; the hold
 * lookup of a usage row whose own hold (by the whole key) is not a settled one runs only for those rows
 * (an `:excess` row, or a wrong one).
 */
const holdsAndUsage = sql`
  select
    (array_agg(json_build_object('request_id', h.request_id, 'debited', h.debited, 'amount', e.amount)
               order by h.request_id)
       filter (where h.request_id is not null
         and ((h.status = 'settled' and h.debited > 0 and (e.amount is null or e.amount <> h.debited))
              or (h.status <> 'settled' and e.key is not null)
              or (h.status = 'settled' and h.debited = 0 and e.key is not null)
              or h.debited > h.amount)))[1:20] as holds,
    (array_agg(json_build_object('key', e.key) order by e.key)
       filter (where case
         when e.recent_usage and (h.request_id is null or h.status <> 'settled')
         then not exists (
           select 1 from billing_holds s where s.status = 'settled'
             and s.request_id in (substr(e.key, 7), regexp_replace(substr(e.key, 7), ':excess$', '')))
         else false end))[1:20] as usage
  from billing_holds h
  full join (select key, amount,
               type = 'usage' and created_at > now() - make_interval(days => ${HOLD_RETENTION_DAYS - 1})
                 as recent_usage
             from billing_entries where key like 'usage:%' or type = 'usage') e
    on e.key = 'usage:' || h.request_id`;

const refundAndDisputeRows = sql`
  select
    (array_agg(json_build_object('key', e.key) order by e.key)
       filter (where e.key not like 'dispute:%' and not exists (
         select 1 from billing_refunds r where r.status = 'applied'
           and (e.key = 'refund:' || r.id or e.key = 'refund:' || r.id || ':pool'))))[1:20] as refunds,
    (array_agg(json_build_object('key', e.key) order by e.key)
       filter (where e.key like 'dispute:%' and not exists (
         select 1 from billing_disputes d
         where e.key in ('dispute:' || d.id, 'dispute:' || d.id || ':pool',
                         'dispute:' || d.id || ':reinstated', 'dispute:' || d.id || ':reinstated:pool'))))[1:20]
      as disputes
  from billing_entries e where e.type = 'refund'`;

export interface FullCheck {
  violations: Violation[];
  /** The checkpoint stored (nothing wrong, `store` asked, no transaction older than half the window). */
  checkpoint: Checkpoint | null;
}

/**
 * Every ledger invariant over the whole ledger, in one snapshot; with `store`, the checkpoint of the
 * incremental runs is stored in the same snapshot when nothing is wrong.
 */
export async function checkFull(
  db: Db,
  { store = false, windowSeconds = SETTLE_WINDOW_SECONDS } = {},
): Promise<FullCheck> {
  return inSnapshot(
    db,
    async (tx) => {
      // A check renamed in invariants.ts but not here would silently run twice or never: refuse.
      const missing = REWRITTEN.filter((name) => !CHECKS.some((c) => c.name === name));
      if (missing.length > 0) throw new Error(`reconcile: no invariant named ${missing.join(', ')}`);
      const horizon =
        store && !(await oldTransactionOpen(tx, windowSeconds))
          ? await safeHorizon(tx, { lastEntryId: 0, lastUsageRecordId: 0 }, windowSeconds)
          : null;
      const seed = freshSeed();
      const found = new Map<string, unknown[]>();
      const add = (check: string, rows: unknown[] | null | undefined) => {
        if (rows?.length) found.set(check, rows.slice(0, 20));
      };

      const accounts = await checkAccounts(tx, seed);
      for (const v of accounts.violations) add(v.check, v.rows);
      // The whole ledger's checksum in one pass (PostgreSQL splits it between parallel workers), and the
      // checkpoint's as that minus the rows above its horizon (the settle window's: a primary key range).
      const [ledger] = await queryRows<{ ledger: unknown; folded: unknown; equal: unknown }>(
        tx,
        sql`select l.ledger, l.ledger - a.above as folded, l.ledger = ${accounts.checksum}::numeric as equal
            from (select coalesce(sum(${rowTerm(seed)}), 0) as ledger from billing_entries) l,
              (select ${
                horizon
                  ? sql`(select coalesce(sum(${rowTerm(seed)}), 0) from billing_entries where id > ${horizon.lastEntryId})`
                  : sql`0::numeric`
              } as above) a`,
      );
      if (ledger!.equal !== true) {
        // Which accounts: the per-account query (a ledger row naming no account moves the checksum
        // alone, and the sum to zero with it).
        const named = await queryRows<unknown>(tx, CHECKS.find((c) => c.name === BALANCE_CHECK)!.query);
        add(
          BALANCE_CHECK,
          named.length > 0
            ? named
            : [{ ledger_checksum: String(ledger!.ledger), balances_checksum: accounts.checksum }],
        );
      }

      const [hu] = await queryRows<{ holds: unknown[] | null; usage: unknown[] | null }>(tx, holdsAndUsage);
      add(HOLDS, hu?.holds);
      add(USAGE, hu?.usage);
      const [rd] = await queryRows<{ refunds: unknown[] | null; disputes: unknown[] | null }>(
        tx,
        refundAndDisputeRows,
      );
      add(REFUND_ROWS, rd?.refunds);
      add(DISPUTE_ROWS, rd?.disputes);
      // The rollup against its records as two numbers (usage-rollup-check.ts), under multipliers drawn now;
      // the row-by-row comparison only to name what differs.
      const sums = rollupChecksums(
        seed,
        Array.from({ length: 6 }, () => randomInt(1, 2 ** 47)),
      );
      const [rollup] = await queryRows<{ equal: unknown; empty: unknown }>(
        tx,
        sql`select r.sum = o.sum as equal, o.empty from (${sums.records}) r, (${sums.rollup}) o`,
      );
      if (rollup!.equal !== true || Number(rollup!.empty) > 0)
        add(ROLLUP, await queryRows<unknown>(tx, rollupDiffersFull));
      for (const c of CHECKS.filter((c) => !REWRITTEN.includes(c.name)))
        add(c.name, await queryRows<unknown>(tx, c.query));

      // In the order of invariants.ts, as the one-query-per-check run reported them.
      const violations = CHECKS.filter((c) => found.has(c.name)).map((c) => ({
        check: c.name,
        rows: found.get(c.name)!,
      }));
      if (violations.length > 0 || !horizon) return { violations, checkpoint: null };
      const checkpoint = { ...horizon, ledgerChecksum: String(ledger!.folded), checksumSeed: seed };
      await writeCheckpoint(tx, checkpoint);
      return { violations, checkpoint };
    },
    {},
  );
}
