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
    await releaseExpiredHolds(t, account);
    const [acct] = await queryRows<{ balance: unknown; held: unknown }>(
      t,
      sql`select balance, held from billing_accounts where id = ${account} for update`,
    );
    const available = acct ? num(acct.balance) - num(acct.held) : 0;
    if (!acct || available < min) {
      throw new AppError(402, 'insufficient_credits', "the organization's token allocation cannot cover this call");
    }
    const take = Math.min(max, available);
    const inserted = await queryRows<{ request_id: string }>(
      t,
      sql`insert into billing_holds (request_id, account_id, org_key, user_id, amount, expires_at)
          values (${input.requestId}, ${account}, ${input.orgKey}, ${input.userId}, ${take},
                  now() + make_interval(secs => ${ttl}))
          on conflict (request_id) do nothing returning request_id`,
    );
    if (inserted.length === 0) throw new AppError(409, 'duplicate_request', 'this request id already holds credits');
    const updated = await queryRows<{ id: string }>(
      t,
      sql`update billing_accounts set held = held + ${take} where id = ${account} and balance - held >= ${take} returning id`,
    );
    if (updated.length === 0) throw new AppError(402, 'insufficient_credits', "the organization's token allocation cannot cover this call");
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
    const [hold] = await queryRows<HoldRow>(
      t,
      sql`select account_id, org_key, amount, status, debited from billing_holds where request_id = ${input.requestId} for update`,
    );
    if (!hold) throw new AppError(404, 'hold_not_found', 'no credits are held for this request');
    const amount = num(hold.amount);
    if (hold.status === 'settled' || hold.status === 'voided') {
      const bal = await accountBalance(t, hold.account_id);
      return { debitedCredits: num(hold.debited), balanceCredits: bal?.balance ?? 0 };
    }
    let debit: number;
    let balance: number;
    if (hold.status === 'held') {
      debit = Math.min(actual, amount);
      const [row] = await queryRows<{ balance: unknown }>(
        t,
        sql`update billing_accounts set balance = balance - ${debit}, held = held - ${amount}
            where id = ${hold.account_id} returning balance`,
      );
      balance = num(row?.balance);
    } else {
      // Expired: its tokens were already released; take what is still available, up to the hold.
      const [acct] = await queryRows<{ balance: unknown; held: unknown }>(
        t,
        sql`select balance, held from billing_accounts where id = ${hold.account_id} for update`,
      );
      debit = Math.max(0, Math.min(actual, amount, num(acct?.balance) - num(acct?.held)));
      const [row] = await queryRows<{ balance: unknown }>(
        t,
        sql`update billing_accounts set balance = balance - ${debit} where id = ${hold.account_id} returning balance`,
      );
      balance = num(row?.balance);
    }
    if (debit > 0) {
      await t.execute(sql`update billing_accounts set balance = balance + ${debit} where id = ${sinkAccount(hold.org_key)}`);
      await t.execute(
        sql`insert into billing_entries (key, from_account, to_account, amount, type, org_key, org_amount, org_balance_after, description)
            values (${`usage:${input.requestId}`}, ${hold.account_id}, ${sinkAccount(hold.org_key)}, ${debit}, 'usage',
                    ${hold.org_key}, ${-debit}, ${balance}, ${input.description})`,
      );
    }
    await t.execute(
      sql`update billing_holds set status = 'settled', debited = ${debit}, closed_at = now() where request_id = ${input.requestId}`,
    );
    return { debitedCredits: debit, balanceCredits: balance };
  });
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
