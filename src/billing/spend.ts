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
  return db.transaction(async (tx) => {
    const t = tx as unknown as Db;
    // One statement releases this org's expired holds and locks its row (hold rows, then the account:
    // the lock order every transaction here follows), returning what is available now.
    const [acct] = await queryRows<{ balance: unknown; held: unknown }>(
      t,
      sql`with e as (
            update billing_holds set status = 'expired', closed_at = now()
            where account_id = ${account} and status = 'held' and expires_at < now()
            returning amount)
          update billing_accounts set held = held - (select coalesce(sum(amount), 0) from e)
          where id = ${account} returning balance, held`,
    );
    const available = acct ? num(acct.balance) - num(acct.held) : 0;
    if (!acct || available < min) {
      throw new AppError(402, 'insufficient_credits', "the organization's token allocation cannot cover this call");
    }
    const take = Math.min(max, available);
    // The hold row (keyed by request id, ON CONFLICT DO NOTHING) and the conditional held update together.
    const updated = await queryRows<{ held: unknown }>(
      t,
      sql`with h as (
            insert into billing_holds (request_id, account_id, org_key, user_id, amount, expires_at)
            values (${input.requestId}, ${account}, ${input.orgKey}, ${input.userId}, ${take}, now() + make_interval(secs => ${ttl}))
            on conflict (request_id) do nothing returning amount)
          update billing_accounts set held = held + (select amount from h)
          where id = ${account} and exists (select 1 from h) and balance - held >= ${take} returning held`,
    );
    if (updated.length === 0) {
      const [dup] = await queryRows<{ request_id: string }>(t, sql`select request_id from billing_holds where request_id = ${input.requestId}`);
      if (dup) throw new AppError(409, 'duplicate_request', 'this request id already holds credits');
      throw new AppError(402, 'insufficient_credits', "the organization's token allocation cannot cover this call");
    }
    return { heldCredits: take };
  });
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
  return db.transaction(async (tx) => {
    const t = tx as unknown as Db;
    // Fast path: redeem the live hold with one guarded update (whoever gets no row did not settle it).
    const [live] = await queryRows<HoldRow>(
      t,
      sql`update billing_holds set status = 'settled', debited = least(${actual}, amount), closed_at = now()
          where request_id = ${input.requestId} and status = 'held'
          returning account_id, org_key, amount, status, debited`,
    );
    if (live) {
      const debit = num(live.debited);
      const balance = await debitAccount(t, input.requestId, live, debit, num(live.amount), input.description);
      return { debitedCredits: debit, balanceCredits: balance };
    }
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
