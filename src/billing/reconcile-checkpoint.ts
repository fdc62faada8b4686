import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { CHECKS, type Violation } from './invariants.js';
import { rollupDiffersSince } from './usage-rollup-check.js';

// Incremental reconciliation (issue 24 item 3; docs/scale.md). The full check (invariants.ts) reads the
// whole ledger and every hold: 71 s at 10M rows. This one reads what was written since a stored
// checkpoint (billing_reconcile_checkpoint, billing_reconcile_sums; src/db/tables/reconcile.ts):
//
// - balances: for each account that ledger rows since the checkpoint touched, the stored balance equals
//   its sum at the checkpoint plus those rows (ledger rows are immutable, so the stored sums stay true);
//   all balances together still sum to zero (one pass over the accounts, which catches a balance changed
//   outside the ledger on an account no new row touched);
// - calls: each `usage` row since the checkpoint has its settled hold with the same debit, and each
//   usage record since the checkpoint (one per settled call, written by the settle) its hold and ledger
//   row: matched by the stored request_id, through primary keys and unique indexes;
// - grants, refund and dispute rows since the checkpoint have their other halves and their records;
// - the usage rollup's hours that new usage records fell in equal those hours' records;
// - the four checks that read the accounts table (below zero, debt, sum to zero, held) run as one pass
//   over it; every other check that reads neither the ledger nor the holds (payments, invoices,
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
 * The full check's queries that each read the whole accounts table: one pass (accountPass) answers all
 * four. At 10M ledger rows the table has 3M accounts, and four passes were most of an incremental run.
 */
const ACCOUNT_CHECKS = [
  'inside account below zero (holds included)',
  'debt account above zero',
  'accounts do not sum to zero',
  'held differs from the sum of active holds',
] as const;

/**
 * The four account checks of the full run in one pass over billing_accounts (the active holds summed
 * through billing_holds_open_idx, a few rows): each column lists the accounts one check finds, in the
 * full check's terms, so a violation reads the same in both modes.
 */
const accountPass = sql`
  select sum(a.balance) as total,
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

async function checkAccounts(tx: Db): Promise<Violation[]> {
  const [row] = await queryRows<{
    total: unknown;
    below_zero: unknown[] | null;
    debt: unknown[] | null;
    held: unknown[] | null;
  }>(tx, accountPass);
  const found: [(typeof ACCOUNT_CHECKS)[number], unknown[] | null | undefined][] = [
    ['inside account below zero (holds included)', row?.below_zero],
    ['debt account above zero', row?.debt],
    // An empty table sums to null, which is zero.
    ['accounts do not sum to zero', Number(row?.total ?? 0) !== 0 ? [{ total: row?.total }] : null],
    ['held differs from the sum of active holds', row?.held],
  ];
  return found.filter(([, rows]) => rows?.length).map(([check, rows]) => ({ check, rows: rows! }));
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

const BALANCE_CHECK = 'stored balance differs from the sum of its ledger rows';

/**
 * The balance check of the touched accounts and the fold of the sums, in one statement: the new rows'
 * per-account sums are taken once; those up to `to` (the horizon) are added to the stored sums, whose
 * new values come back from the upsert and are compared with the balances (plus any rows above the
 * horizon). Each touched account's stored sum is read once, by the upsert, instead of once by a check
 * and again by a fold (at 10M rows, 100,000 new rows touch 200,000 accounts: docs/scale.md). Accounts
 * touched only above the horizon read their stored sum as it is. The caller rolls the fold back when
 * anything is wrong.
 */
function checkAndFoldBalances(from: Checkpoint, to: Checkpoint) {
  const h = from.lastEntryId;
  return sql`with moved as (
      select acct, sum(delta) filter (where id <= ${to.lastEntryId}) as folded, sum(delta) as delta from (
        select id, to_account as acct, amount as delta from billing_entries where id > ${h}
        union all select id, from_account, -amount from billing_entries where id > ${h}) x
      group by acct),
    upsert as (
      insert into billing_reconcile_sums (account_id, ledger_sum)
      select acct, folded from moved where folded is not null
      on conflict (account_id) do update set ledger_sum = billing_reconcile_sums.ledger_sum + excluded.ledger_sum
      returning account_id, ledger_sum)
    select a.id, a.balance, l.ledger from moved m
    join billing_accounts a on a.id = m.acct
    left join upsert u on u.account_id = m.acct
    cross join lateral (select coalesce(u.ledger_sum - m.folded,
        (select s.ledger_sum from billing_reconcile_sums s where s.account_id = m.acct), 0) + m.delta as ledger) l
    where a.balance <> l.ledger`;
}

/** Thrown inside the snapshot to roll back the fold when something was found. */
class Found extends Error {
  constructor(readonly violations: Violation[]) {
    super('reconcile: violations found since the checkpoint');
  }
}

export async function readCheckpoint(db: Db): Promise<Checkpoint | null> {
  const [row] = await queryRows<{ last_entry_id: unknown; last_usage_record_id: unknown }>(
    db,
    sql`select last_entry_id, last_usage_record_id from billing_reconcile_checkpoint where id = 1`,
  );
  return row
    ? { lastEntryId: Number(row.last_entry_id), lastUsageRecordId: Number(row.last_usage_record_id) }
    : null;
}

/** Whether any transaction older than half the window is open (then the checkpoint may not move). */
async function oldTransactionOpen(db: Db, windowSeconds: number): Promise<boolean> {
  const [row] = await queryRows<{ n: unknown }>(
    db,
    sql`select count(*) as n from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid()
          and xact_start < now() - make_interval(secs => ${windowSeconds / 2})`,
  );
  return Number(row?.n ?? 0) > 0;
}

/**
 * Where the checkpoint may move to: the newest ledger row and usage record older than the window (never
 * backwards), or nowhere when a transaction older than half the window is open.
 */
async function safeHorizon(db: Db, from: Checkpoint, windowSeconds: number): Promise<Checkpoint> {
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

async function writeCheckpoint(db: Db, cp: Checkpoint): Promise<void> {
  await db.execute(
    sql`insert into billing_reconcile_checkpoint (id, last_entry_id, last_usage_record_id, taken_at)
        values (1, ${cp.lastEntryId}, ${cp.lastUsageRecordId}, now())
        on conflict (id) do update set last_entry_id = excluded.last_entry_id,
          last_usage_record_id = excluded.last_usage_record_id, taken_at = excluded.taken_at`,
  );
}

/** Folds the ledger rows in (from, to] into the stored sums. */
async function foldSums(db: Db, from: number, to: number): Promise<void> {
  if (to <= from) return;
  await db.execute(
    sql`insert into billing_reconcile_sums (account_id, ledger_sum)
        select acct, sum(delta) from (
          select to_account as acct, amount as delta from billing_entries where id > ${from} and id <= ${to}
          union all select from_account, -amount from billing_entries where id > ${from} and id <= ${to}) x
        group by acct
        on conflict (account_id) do update
          set ledger_sum = billing_reconcile_sums.ledger_sum + excluded.ledger_sum`,
  );
}

/**
 * Memory for the run's sorts and hashes (this transaction only). The new rows' per-account sums and the
 * rollup hours they touched are each a few MB per 100,000 rows: at a stock server's 4 MB they spilled to
 * disk (external merge), a third of the incremental run at 10M rows (docs/scale.md). Reconciliation is
 * one operator's job at a time, so it may take more than a request's statement does.
 */
const RECONCILE_WORK_MEM = '64MB';

const inSnapshot = <T>(db: Db, fn: (tx: Db) => Promise<T>): Promise<T> =>
  db.transaction(
    async (tx) => {
      await tx.execute(sql.raw(`set local work_mem = '${RECONCILE_WORK_MEM}'`));
      return fn(tx);
    },
    { isolationLevel: 'repeatable read' },
  );

/**
 * After a full check found nothing wrong: stores the sums of every account's rows up to a safe horizon
 * (one pass over the ledger, which the full check read anyway).
 */
export async function takeCheckpoint(
  db: Db,
  windowSeconds = SETTLE_WINDOW_SECONDS,
): Promise<Checkpoint | null> {
  return inSnapshot(db, async (tx) => {
    if (await oldTransactionOpen(tx, windowSeconds)) return null;
    const cp = await safeHorizon(tx, { lastEntryId: 0, lastUsageRecordId: 0 }, windowSeconds);
    await tx.execute(sql`delete from billing_reconcile_sums`);
    await foldSums(tx, 0, cp.lastEntryId);
    await writeCheckpoint(tx, cp);
    return cp;
  });
}

/**
 * The incremental check from the stored checkpoint; moves the checkpoint forward when nothing is wrong.
 * Null when there is no checkpoint yet (run the full check first).
 */
export async function checkSinceCheckpoint(
  db: Db,
  windowSeconds = SETTLE_WINDOW_SECONDS,
): Promise<{ violations: Violation[]; from: Checkpoint; to: Checkpoint } | null> {
  const found: { violations: Violation[]; from?: Checkpoint } = { violations: [] };
  try {
    return await inSnapshot(db, async (tx) => {
      const from = await readCheckpoint(tx);
      if (!from) return null;
      found.from = from;
      // Every check of the full run is either run as it is or replaced here: a new or renamed check must
      // be placed in one of the two lists, never silently left out of the incremental run.
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
      const checks = [...cheap, ...sinceChecks(from)];
      const violations: Violation[] = await checkAccounts(tx);
      for (const c of checks) {
        const rows = await queryRows<unknown>(tx, c.query);
        if (rows.length > 0) violations.push({ check: c.name, rows: rows.slice(0, 20) });
      }
      const to = await safeHorizon(tx, from, windowSeconds);
      const balances = await queryRows<unknown>(tx, checkAndFoldBalances(from, to));
      if (balances.length > 0) violations.unshift({ check: BALANCE_CHECK, rows: balances.slice(0, 20) });
      if (violations.length > 0) throw new Found(violations);
      await writeCheckpoint(tx, to);
      return { violations, from, to };
    });
  } catch (err) {
    // The fold rolled back with the transaction: the checkpoint stays where it was.
    if (err instanceof Found && found.from)
      return { violations: err.violations, from: found.from, to: found.from };
    throw err;
  }
}
