import { randomInt } from 'node:crypto';
import { sql, type SQL } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { CHECKS, type Violation } from './invariants.js';
import { rollupDiffersSince } from './usage-rollup-check.js';
import { transaction } from '../db/transaction.js';

// Incremental reconciliation (docs/scale.md). The full check (invariants.ts) reads the
// whole ledger and every hold: 380 s at 10M rows. This one reads what was written since a stored
// checkpoint (billing_reconcile_checkpoint; src/db/tables/reconcile.ts), plus one pass over the accounts:
//
// - balances: every balance equals its ledger sum, checked as one number. Each account has a weight
//   w(a), an odd 64-bit hash of its id under a seed drawn with the checkpoint; the checkpoint stores
//   Σ_a w(a) × (a's ledger rows up to it). Ledger rows are immutable, so that number stays true; the rows
//   since add amount × (w(to) − w(from)) each. The account pass computes Σ_a w(a) × balance(a); the two
//   are equal when every balance equals its ledger sum, and differ when exactly one does not (w(a) ≠ 0,
//   exact numeric arithmetic); several wrong balances cancel only if their differences, weighted by
//   pseudo-random 64-bit weights drawn before they went wrong, sum to zero (docs/scale.md). The number
//   does not say which account: when it differs, the run falls back to the full check, which names them;
// - calls: each `usage` row since the checkpoint has its settled hold with the same debit, and each
//   usage record since the checkpoint (one per settled call, written by the settle) its hold and ledger
//   row: matched by the stored request_id, through primary keys and unique indexes;
// - grants, refund and dispute rows since the checkpoint have their other halves and their records;
// - the usage rollup's hours that new usage records fell in equal those hours' records;
// - the four checks that read the accounts table (below zero, debt, sum to zero, held) run in the same
//   pass over it; every other check that reads neither the ledger nor the holds (payments, invoices,
//   sessions, refunds, disputes: tables that grow with customers, not with calls) runs as in the full
//   check.
//
// All in one REPEATABLE READ snapshot. The checkpoint then moves forward, but only over rows older than
// SETTLE_WINDOW: ids are drawn before commit, so a row with a smaller id than one already visible may
// still be in flight; a row older than the window whose transaction had not committed would need a
// transaction longer than half the window, and none is open (checked) when the checkpoint moves.

/** Rows younger than this are checked but not folded into the checkpoint. */
export const SETTLE_WINDOW_SECONDS = 600;

/**
 * An account's weight in the checksum: its id hashed under the checkpoint's seed (64 bits), made odd so
 * it is never zero, as numeric so that no product or sum wraps. `id` is a column (or expression) of
 * account ids.
 */
const weight = (id: SQL, seed: number) => sql`(hashtextextended(${id}, ${seed}) | 1)::numeric`;

/**
 * What one ledger row adds to the checksum: it moves `amount` into `to_account` and out of
 * `from_account`, so it adds amount × (w(to) − w(from)).
 */
export const rowTerm = (seed: number) =>
  sql`amount::numeric * (${weight(sql`to_account`, seed)} - ${weight(sql`from_account`, seed)})`;
/** What the ledger rows `where` selects add to the checksum (the rows since: the primary key's range). */
const rowsChecksum = (seed: number, where: SQL) =>
  sql`coalesce(sum(${rowTerm(seed)}) filter (where ${where}), 0)`;

/**
 * The full check's queries that each read the whole accounts table: one pass (accountPass) answers all
 * four. At 10M ledger rows the table has 3M accounts, and four passes were most of an incremental run.
 */
export const ACCOUNT_CHECKS = [
  'inside account below zero (holds included)',
  'debt account above zero',
  'accounts do not sum to zero',
  'held differs from the sum of active holds',
] as const;

/**
 * The four account checks of the full run in one pass over billing_accounts (the active holds summed
 * through billing_holds_open_idx, a few rows): each column lists the accounts one check finds, in the
 * full check's terms, so a violation reads the same in both modes. The same pass sums the balances'
 * checksum (checkBalances).
 */
const accountPass = (seed: number) => sql`
  select sum(a.balance) as total, coalesce(sum(${weight(sql`a.id`, seed)} * a.balance), 0) as checksum,
    (array_agg(json_build_object('id', a.id, 'balance', a.balance, 'held', a.held) order by a.id)
       filter (where a.kind in ('org', 'pool') and (a.balance < a.held or a.held < 0 or a.balance < 0)))[1:20]
      as below_zero,
    (array_agg(json_build_object('id', a.id, 'balance', a.balance) order by a.id)
       filter (where a.kind = 'debt' and a.balance > 0))[1:20] as debt,
    (array_agg(json_build_object('id', a.id, 'held', a.held, 'holds', coalesce(h.s, 0)) order by a.id)
       filter (where a.held <> coalesce(h.s, 0)))[1:20] as held
  from billing_accounts a
  left join (select account_id, sum(amount) as s from billing_holds where status = 'held' group by account_id) h
    on h.account_id = a.id`;

export async function checkAccounts(
  tx: Db,
  seed: number,
): Promise<{ violations: Violation[]; checksum: string }> {
  const [row] = await queryRows<{
    total: unknown;
    checksum: string | number | null;
    below_zero: unknown[] | null;
    debt: unknown[] | null;
    held: unknown[] | null;
  }>(tx, accountPass(seed));
  const found: [(typeof ACCOUNT_CHECKS)[number], unknown[] | null | undefined][] = [
    ['inside account below zero (holds included)', row?.below_zero],
    ['debt account above zero', row?.debt],
    // An empty table sums to null, which is zero.
    ['accounts do not sum to zero', Number(row?.total ?? 0) !== 0 ? [{ total: row?.total }] : null],
    ['held differs from the sum of active holds', row?.held],
  ];
  return {
    violations: found.filter(([, rows]) => rows?.length).map(([check, rows]) => ({ check, rows: rows! })),
    checksum: String(row?.checksum ?? '0'),
  };
}

/** The full check's queries that read neither the ledger nor the holds in whole: run as they are. */
const CHEAP_CHECKS = [
  'deleted client still holds tokens',
  'paid subscription invoice granted twice or without money paid',
  'completed top-up session without exactly one grant',
  'refund ledger rows differ from their refund',
  'dispute ledger rows differ from their dispute',
  'payment refunded beyond its grant or differing from its refunds',
];

/** The full check's queries that read the whole ledger or every hold: replaced by sinceChecks. */
const REPLACED_CHECKS = [
  'stored balance differs from the sum of its ledger rows',
  'settled hold differs from its usage row',
  'usage row without a settled hold',
  'allocation half of a grant missing or different',
  'refund row without an applied refund',
  'dispute row without its dispute',
  'usage rollup differs from its usage records',
];

export interface Checkpoint {
  lastEntryId: number;
  lastUsageRecordId: number;
  /** Σ w(account) × the account's ledger sum up to lastEntryId (exact, as numeric's text). */
  ledgerChecksum: string;
  checksumSeed: number;
}

/** The request id a `usage` row's key names (`usage:<id>` or `usage:<id>:excess`). */
const requestIdOfKey = sql`case when e.key like '%:excess' then substr(e.key, 7, length(e.key) - 13)
  else substr(e.key, 7) end`;

/** The checks of rows written after `cp`, each returning its offending rows. */
function sinceChecks(cp: Checkpoint): { name: string; query: ReturnType<typeof sql> }[] {
  const h = cp.lastEntryId;
  return [
    {
      name: 'usage row without a settled hold of the same debit',
      query: sql`select e.key, e.amount, h.status, h.debited from billing_entries e
                 left join billing_holds h on h.request_id = ${requestIdOfKey}
                 where e.id > ${h} and e.type = 'usage'
                   and (h.request_id is null or h.status <> 'settled'
                        or (e.key not like '%:excess' and e.amount <> h.debited))`,
    },
    {
      name: 'settled call without its hold or ledger row',
      query: sql`select u.request_id, h.status, h.debited, h.amount, e.amount as ledger
                 from usage_records u
                 left join billing_holds h on h.request_id = u.request_id
                 left join billing_entries e on e.key = 'usage:' || u.request_id
                 where u.id > ${cp.lastUsageRecordId}
                   and (h.request_id is null or h.status <> 'settled' or h.debited > h.amount
                        or (h.debited > 0 and (e.amount is null or e.amount <> h.debited))
                        or (h.debited = 0 and e.id is not null))`,
    },
    {
      name: 'allocation half of a grant missing or different',
      query: sql`select g.key from billing_entries g
                 left join billing_entries a on a.key = g.key || ':allocate'
                 left join billing_entries d on d.key = g.key || ':debt' and d.type = 'debt_payment'
                 where g.id > ${h} and g.from_account like 'src:%' and g.key not like 'test:%'
                   and g.type not in ('refund', 'debt')
                   and coalesce(a.amount, 0) + coalesce(d.amount, 0) <> g.amount`,
    },
    {
      name: 'refund row without an applied refund',
      query: sql`select e.key from billing_entries e
                 where e.id > ${h} and e.type = 'refund' and e.key not like 'dispute:%' and not exists (
                   select 1 from billing_refunds r where r.status = 'applied'
                     and (e.key = 'refund:' || r.id or e.key = 'refund:' || r.id || ':pool'))`,
    },
    {
      name: 'dispute row without its dispute',
      query: sql`select e.key from billing_entries e
                 where e.id > ${h} and e.type = 'refund' and e.key like 'dispute:%' and not exists (
                   select 1 from billing_disputes d
                   where e.key in ('dispute:' || d.id, 'dispute:' || d.id || ':pool',
                                   'dispute:' || d.id || ':reinstated', 'dispute:' || d.id || ':reinstated:pool'))`,
    },
    {
      // The hours new records fell in: their rollup rows against all their records.
      name: 'usage rollup differs from its usage records',
      query: rollupDiffersSince(cp.lastUsageRecordId),
    },
  ];
}

export const BALANCE_CHECK = 'stored balance differs from the sum of its ledger rows';

/**
 * The stored balances' checksum (Σ w(a) × balance(a), read by the account pass) against the ledger's:
 * the checkpoint's plus the rows since. Equal when every balance equals its ledger sum. The new
 * checkpoint's checksum is the stored one plus the rows up to the horizon `to`.
 */
async function checkBalances(
  tx: Db,
  from: Checkpoint,
  to: Horizon,
  balances: string,
): Promise<{ violation: Violation | null; checksum: string }> {
  const [row] = await queryRows<{ ledger: unknown; folded: unknown; equal: unknown }>(
    tx,
    sql`select l.ledger, l.folded, l.ledger = ${balances}::numeric as equal from (
          select ${from.ledgerChecksum}::numeric + ${rowsChecksum(from.checksumSeed, sql`true`)} as ledger,
            ${from.ledgerChecksum}::numeric + ${rowsChecksum(from.checksumSeed, sql`id <= ${to.lastEntryId}`)} as folded
          from billing_entries where id > ${from.lastEntryId}) l`,
  );
  const violation =
    row!.equal === true
      ? null
      : {
          check: BALANCE_CHECK,
          // Which accounts: the full check (the run falls back to it) names them.
          rows: [
            {
              ledger_checksum: String(row!.ledger),
              balances_checksum: balances,
              accounts: 'named by the full check',
            },
          ],
        };
  return { violation, checksum: String(row!.folded) };
}

export async function readCheckpoint(db: Db): Promise<Checkpoint | null> {
  const [row] = await queryRows<{
    last_entry_id: unknown;
    last_usage_record_id: unknown;
    ledger_checksum: unknown;
    checksum_seed: unknown;
  }>(
    db,
    sql`select last_entry_id, last_usage_record_id, ledger_checksum, checksum_seed
        from billing_reconcile_checkpoint where id = 1`,
  );
  return row
    ? {
        lastEntryId: Number(row.last_entry_id),
        lastUsageRecordId: Number(row.last_usage_record_id),
        ledgerChecksum: String(row.ledger_checksum),
        checksumSeed: Number(row.checksum_seed),
      }
    : null;
}

/** Whether any transaction older than half the window is open (then the checkpoint may not move). */
export async function oldTransactionOpen(db: Db, windowSeconds: number): Promise<boolean> {
  const [row] = await queryRows<{ n: unknown }>(
    db,
    sql`select count(*) as n from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid()
          and xact_start < now() - make_interval(secs => ${windowSeconds / 2})`,
  );
  return Number(row?.n ?? 0) > 0;
}

/** How far a checkpoint reaches. */
export type Horizon = Pick<Checkpoint, 'lastEntryId' | 'lastUsageRecordId'>;

/**
 * Where the checkpoint may move to: the newest ledger row and usage record older than the window (never
 * backwards), or nowhere when a transaction older than half the window is open.
 */
export async function safeHorizon(db: Db, from: Horizon, windowSeconds: number): Promise<Horizon> {
  if (await oldTransactionOpen(db, windowSeconds)) return from;
  const [row] = await queryRows<{ e: unknown; u: unknown }>(
    db,
    sql`select (select max(id) from billing_entries
                where created_at < now() - make_interval(secs => ${windowSeconds})) as e,
               (select max(id) from usage_records
                where created_at < now() - make_interval(secs => ${windowSeconds})) as u`,
  );
  return {
    lastEntryId: Math.max(from.lastEntryId, Number(row?.e ?? 0)),
    lastUsageRecordId: Math.max(from.lastUsageRecordId, Number(row?.u ?? 0)),
  };
}

export async function writeCheckpoint(db: Db, cp: Checkpoint): Promise<void> {
  await db.execute(
    sql`insert into billing_reconcile_checkpoint
          (id, last_entry_id, last_usage_record_id, ledger_checksum, checksum_seed, taken_at)
        values (1, ${cp.lastEntryId}, ${cp.lastUsageRecordId}, ${cp.ledgerChecksum}::numeric, ${cp.checksumSeed}, now())
        on conflict (id) do update set last_entry_id = excluded.last_entry_id,
          last_usage_record_id = excluded.last_usage_record_id, ledger_checksum = excluded.ledger_checksum,
          checksum_seed = excluded.checksum_seed, taken_at = excluded.taken_at`,
  );
}

/**
 * Memory for the run's sorts and hashes (this transaction only). The new rows' per-account sums and the
 * rollup hours they touched are each a few MB per 100,000 rows: at a stock server's 4 MB they spilled to
 * disk (external merge), a third of the incremental run at 10M rows (docs/scale.md). Reconciliation is
 * one operator's job at a time, so it may take more than a request's statement does.
 */
const RECONCILE_WORK_MEM = '64MB';

export const inSnapshot = <T>(
  db: Db,
  fn: (tx: Db) => Promise<T>,
  settings: Record<string, string> = { work_mem: RECONCILE_WORK_MEM },
): Promise<T> =>
  transaction(
    db,
    async (tx) => {
      for (const [name, value] of Object.entries(settings))
        await tx.execute(sql`select set_config(${name}, ${value}, true)`);
      return fn(tx);
    },
    { isolationLevel: 'repeatable read' },
  );

/**
 * A checksum seed drawn now, independently of any wrong balance already there or to come: see
 * docs/scale.md for why that makes two or more wrong balances cancel only by a chance of about 2^-63 (at
 * most 2^-47: the seeds there are, randomInt's range).
 */
export const freshSeed = (): number => randomInt(2 ** 47) - 2 ** 46;

/**
 * The incremental check from the stored checkpoint; moves the checkpoint forward when nothing is wrong.
 * Null when there is no checkpoint yet (run the full check first).
 */
export async function checkSinceCheckpoint(
  db: Db,
  windowSeconds = SETTLE_WINDOW_SECONDS,
): Promise<{ violations: Violation[]; from: Checkpoint; to: Checkpoint } | null> {
  return inSnapshot(db, async (tx) => {
    const from = await readCheckpoint(tx);
    if (!from) return null;
    // Every check of the full run is either run as it is or replaced here: a new or renamed check must
    // be placed in one of the lists, never silently left out of the incremental run.
    const placed = [...ACCOUNT_CHECKS, ...CHEAP_CHECKS, ...REPLACED_CHECKS] as string[];
    const unplaced = CHECKS.filter((c) => !placed.includes(c.name));
    const cheap = CHECKS.filter((c) => CHEAP_CHECKS.includes(c.name));
    const accounts = CHECKS.filter((c) => (ACCOUNT_CHECKS as readonly string[]).includes(c.name));
    if (
      unplaced.length > 0 ||
      cheap.length !== CHEAP_CHECKS.length ||
      accounts.length !== ACCOUNT_CHECKS.length
    )
      throw new Error(
        `reconcile: place ${unplaced.map((c) => c.name).join(', ') || 'every check'} in ACCOUNT_CHECKS, CHEAP_CHECKS or REPLACED_CHECKS`,
      );
    const pass = await checkAccounts(tx, from.checksumSeed);
    const violations = pass.violations;
    for (const c of [...cheap, ...sinceChecks(from)]) {
      const rows = await queryRows<unknown>(tx, c.query);
      if (rows.length > 0) violations.push({ check: c.name, rows: rows.slice(0, 20) });
    }
    const horizon = await safeHorizon(tx, from, windowSeconds);
    const balances = await checkBalances(tx, from, horizon, pass.checksum);
    if (balances.violation) violations.unshift(balances.violation);
    // Something found: the checkpoint stays where it was (the run falls back to the full check).
    if (violations.length > 0) return { violations, from, to: from };
    const to = { ...horizon, ledgerChecksum: balances.checksum, checksumSeed: from.checksumSeed };
    await writeCheckpoint(tx, to);
    return { violations, from, to };
  });
}
