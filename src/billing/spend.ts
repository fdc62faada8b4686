import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { AppError } from '../http/errors.js';
import { accountBalance, orgAccount, sinkAccount } from './ledger.js';

// Spending primitives for the model routes (CONTRACT §8: reserve-then-settle; a balance never goes
// below zero, streaming included; a failed upstream call debits nothing; one `usage` transaction per
// call that spent). Lock order everywhere: hold rows first, then account rows in ascending id.

/** A hold that nobody settled within this time was left by a crashed process and is released. */
export const DEFAULT_HOLD_TTL_SECONDS = 15 * 60;

const num = (v: unknown): number => Number(v ?? 0);

/** Interface document, Token economics: a call costing `cost_cents` debits round(cost_cents × 1000 / 90). */
export function creditsForCostCents(costCents: number): number {
  if (!Number.isFinite(costCents) || costCents <= 0) return 0;
  return Math.round((costCents * 1000) / 90);
}

/** Releases the expired holds of one org account; returns the tokens released. Runs inside `tx`. */
export async function releaseExpiredHolds(tx: Db, accountId: string): Promise<number> {
  const [row] = await queryRows<{ released: unknown; n: unknown }>(
    tx,
    sql`with e as (
          update billing_holds set status = 'expired', closed_at = now()
          where account_id = ${accountId} and status = 'held' and expires_at < now()
          returning amount)
        select coalesce(sum(amount), 0)::bigint as released, count(*)::int as n from e`,
  );
  const released = num(row?.released);
  if (num(row?.n) > 0) {
    await tx.execute(sql`update billing_accounts set held = held - ${released} where id = ${accountId}`);
  }
  return released;
}

export interface ReserveInput {
  orgKey: string;
  userId: string;
  requestId: string;
  minCredits: number;
  maxCredits: number;
  ttlSeconds?: number;
}

/**
 * Holds min(maxCredits, available) on the org's allocation. 402 `insufficient_credits` when the
 * allocation cannot cover minCredits, even if the owner still has unallocated tokens (interface
 * document, Billing rule 5). 409 `duplicate_request` when the request id already has a hold.
 */
export async function reserveCredits(db: Db, input: ReserveInput): Promise<{ heldCredits: number }> {
  const min = Math.max(0, Math.ceil(input.minCredits));
  const max = Math.max(min, Math.floor(input.maxCredits));
  const account = orgAccount(input.orgKey);
  const ttl = input.ttlSeconds ?? DEFAULT_HOLD_TTL_SECONDS;
  // ONE statement in autocommit (one round trip; the account row is locked only for the statement), in
  // the lock order every transaction here follows — hold rows, then the account:
  //  e  releases this org's expired holds (locking those hold rows);
  //  a  updates the account: held − released + the new hold. The amount is computed in the SET itself
  //     because only an UPDATE's own expressions are re-evaluated on the newest row version when a
  //     concurrent reserve or settle committed first (READ COMMITTED); a value read by a separate
  //     SELECT … FOR UPDATE in the same statement is not safe to write back (measured: a lost update).
  //     RETURNING shows only new values, so the amount leaves the SET through a transaction-local
  //     setting (set_config(…, true)); −1 means "no hold" (a duplicate, or it cannot pay min). The
  //     release of expired holds is written either way;
  //  h  then inserts the hold row. Its request id is new, so nobody waits on it; two reserves racing
  //     with one request id meet at the primary key and the loser's whole statement fails (23505 →
  //     409), so `held` never counts a hold that was not inserted.
  let rows: { take: unknown; dup: boolean; inserted: unknown }[];
  try {
    rows = await queryRows(
      db,
      sql`with e as (
            update billing_holds set status = 'expired', closed_at = now()
            where account_id = ${account} and status = 'held' and expires_at < now()
            returning amount),
          r as (select coalesce(sum(amount), 0)::bigint as released from e),
          d as (select exists (select 1 from billing_holds where request_id = ${input.requestId}) as dup),
          a as (
            update billing_accounts b
            set held = b.held - r.released + greatest(0, set_config('svc.reserve_take',
              (case when not d.dup and b.balance - b.held + r.released >= ${min}::bigint
                    then least(${max}::bigint, b.balance - b.held + r.released) else -1 end)::text, true)::bigint)
            from r, d where b.id = ${account}
            returning d.dup, current_setting('svc.reserve_take')::bigint as take),
          h as (
            insert into billing_holds (request_id, account_id, org_key, user_id, amount, expires_at)
            select ${input.requestId}, ${account}, ${input.orgKey}, ${input.userId}, a.take, now() + make_interval(secs => ${ttl})
            from a where a.take >= 0
            returning amount)
          select a.take, a.dup, (select count(*) from h) as inserted from a`,
    );
  } catch (err) {
    if (isUniqueViolation(err)) throw duplicateRequest();
    throw err;
  }
  const [row] = rows;
  if (row?.dup) throw duplicateRequest();
  if (!row || num(row.take) < 0) throw new AppError(402, 'insufficient_credits', "the organization's token allocation cannot cover this call");
  return { heldCredits: num(row.take) };
}

const duplicateRequest = () => new AppError(409, 'duplicate_request', 'this request id already holds credits');

/** node-postgres and PGlite report 23505; drizzle wraps driver errors in `cause`. */
function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string } } | null;
  return e?.code === '23505' || e?.cause?.code === '23505';
}

interface HoldRow {
  account_id: string;
  org_key: string;
  amount: unknown;
  status: string;
  debited: unknown;
}

/**
 * Debits min(actualCredits, held) and releases the rest, exactly once per request id; one `usage`
 * transaction when something was debited. A repeated settle returns the first result. A hold that
 * expired before its settle (a very slow call) still debits what the allocation can pay, never more.
 */
export async function settleCredits(
  db: Db,
  input: { requestId: string; actualCredits: number; description: string },
): Promise<{ debitedCredits: number; balanceCredits: number }> {
  const actual = Math.max(0, Math.round(input.actualCredits));
  // The common path is ONE statement in autocommit, in the fixed lock order — the hold row, then the org
  // account, then its usage sink (`org:` < `sink:`; each step reads the one before, so it cannot run
  // first):
  //  h  redeems the live hold with one guarded update (whoever gets no row did not settle it);
  //  a  debits min(actual, held) from the org and releases the whole hold; SET reads the row's own
  //     columns, so a concurrent reserve's committed change is applied on top, never lost;
  //  e  writes the `usage` ledger row (idempotency key usage:<request id>) when it debits > 0;
  //  s  credits the org's sink (`sink:` + org key, as sinkAccount builds it).
  const [live] = await queryRows<{ debited: unknown; balance: unknown }>(
    db,
    sql`with h as (
          update billing_holds set status = 'settled', debited = least(${actual}::bigint, amount), closed_at = now()
          where request_id = ${input.requestId} and status = 'held'
          returning account_id, org_key, amount, debited),
        a as (
          update billing_accounts b set balance = b.balance - h.debited, held = b.held - h.amount
          from h where b.id = h.account_id
          returning b.id, b.balance, h.org_key, h.debited),
        e as (
          insert into billing_entries (key, from_account, to_account, amount, type, org_key, org_amount, org_balance_after, description)
          select ${`usage:${input.requestId}`}, a.id, 'sink:' || a.org_key, a.debited, 'usage', a.org_key, -a.debited, a.balance, ${input.description}
          from a where a.debited > 0
          returning to_account, amount),
        s as (
          update billing_accounts b set balance = b.balance + e.amount
          from e where b.id = e.to_account
          returning b.id)
        select a.debited, a.balance, (select count(*) from s) as sinks from a`,
  );
  if (live) return { debitedCredits: num(live.debited), balanceCredits: num(live.balance) };
  return db.transaction(async (tx) => {
    const t = tx as unknown as Db;
    // Settled, voided, expired or unknown (rare): the first result stands, or an expired hold takes what
    // is still available.
    const [hold] = await queryRows<HoldRow>(
      t,
      sql`select account_id, org_key, amount, status, debited from billing_holds where request_id = ${input.requestId} for update`,
    );
    if (!hold) throw new AppError(404, 'hold_not_found', 'no credits are held for this request');
    if (hold.status !== 'expired') {
      // Settled or voided before: the first result stands.
      const bal = await accountBalance(t, hold.account_id);
      return { debitedCredits: num(hold.debited), balanceCredits: bal?.balance ?? 0 };
    }
    // Expired (a very slow call): its tokens were already released; take what is still available, up
    // to the hold, never below zero.
    const [acct] = await queryRows<{ balance: unknown; held: unknown }>(
      t,
      sql`select balance, held from billing_accounts where id = ${hold.account_id} for update`,
    );
    const debit = Math.max(0, Math.min(actual, num(hold.amount), num(acct?.balance) - num(acct?.held)));
    await t.execute(
      sql`update billing_holds set status = 'settled', debited = ${debit}, closed_at = now() where request_id = ${input.requestId}`,
    );
    const balance = await debitAccount(t, input.requestId, hold, debit, 0, input.description);
    return { debitedCredits: debit, balanceCredits: balance };
  });
}

/** Debits the org (releasing `release` held tokens), credits its usage sink, writes the `usage` row. */
async function debitAccount(t: Db, requestId: string, hold: HoldRow, debit: number, release: number, description: string): Promise<number> {
  const sink = sinkAccount(hold.org_key);
  const [row] = await queryRows<{ balance: unknown }>(
    t,
    sql`with a as (
          update billing_accounts set balance = balance - ${debit}, held = held - ${release}
          where id = ${hold.account_id} returning balance),
        e as (
          insert into billing_entries (key, from_account, to_account, amount, type, org_key, org_amount, org_balance_after, description)
          select ${`usage:${requestId}`}, ${hold.account_id}, ${sink}, ${debit}, 'usage', ${hold.org_key}, ${-debit}, a.balance, ${description}
          from a where ${debit} > 0
          returning id)
        select balance from a`,
  );
  // The sink after the org row: the same ascending lock order as every other transaction.
  if (debit > 0) await t.execute(sql`update billing_accounts set balance = balance + ${debit} where id = ${sink}`);
  return num(row?.balance);
}

/** Releases a hold without debiting (a failed upstream call debits nothing). Idempotent. */
export async function voidHold(db: Db, requestId: string): Promise<{ releasedCredits: number }> {
  return db.transaction(async (tx) => {
    const t = tx as unknown as Db;
    const [hold] = await queryRows<HoldRow>(
      t,
      sql`select account_id, org_key, amount, status, debited from billing_holds where request_id = ${requestId} for update`,
    );
    if (!hold || hold.status !== 'held') return { releasedCredits: 0 };
    await t.execute(sql`update billing_accounts set held = held - ${num(hold.amount)} where id = ${hold.account_id}`);
    await t.execute(sql`update billing_holds set status = 'voided', closed_at = now() where request_id = ${requestId}`);
    return { releasedCredits: num(hold.amount) };
  });
}

/** The org's token balance (balance_credits): its ledger balance, holds in flight included. */
export async function orgBalanceCredits(db: Db, orgKey: string): Promise<number> {
  return (await accountBalance(db, orgAccount(orgKey)))?.balance ?? 0;
}

/** The periodic sweep: releases every expired hold, one org per transaction (no lock-order cycles). */
export async function expireStaleHolds(db: Db, limit = 500): Promise<number> {
  const accounts = await queryRows<{ account_id: string }>(
    db,
    sql`select distinct account_id from billing_holds where status = 'held' and expires_at < now() limit ${limit}`,
  );
  let released = 0;
  for (const { account_id } of accounts) {
    released += await db.transaction((tx) => releaseExpiredHolds(tx as unknown as Db, account_id));
  }
  return released;
}
