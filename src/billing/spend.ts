import { sql } from 'drizzle-orm';
import { pgCode, retryOnDeadlock } from '../db/deadlock.js';
import { namedRows, queryRows, type Db } from '../db/client.js';
import { AppError, errorOf } from '../http/errors.js';
import { BILLING_ERRORS } from './errors.js';
import { accountBalance, orgAccount, sinkAccount } from './ledger.js';
import { noteBudgetExhausted } from './budgets.js';
import { transaction } from '../db/transaction.js';

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

/**
 * Releases the expired holds of one org account; returns the tokens released. Runs inside `tx`. The
 * hold rows go through svc_release_expired_holds (src/db/custom/model-path-functions.sql), as in a reserve.
 */
export async function releaseExpiredHolds(tx: Db, accountId: string): Promise<number> {
  const [row] = await queryRows<{ released: unknown }>(
    tx,
    sql`select svc_release_expired_holds(${accountId}) as released`,
  );
  const released = num(row?.released);
  if (released > 0) {
    await tx.execute(sql`update billing_accounts set held = held - ${released} where id = ${accountId}`);
  }
  return released;
}

export interface ReserveInput {
  orgKey: string;
  /** Who makes the call. */
  userId: string;
  /** The `svc_` token it is made with (null: another credential): that token's budget applies too. */
  apiTokenId?: number | null;
  requestId: string;
  minCredits: number;
  maxCredits: number;
  ttlSeconds?: number;
}

const insufficientCredits = () => errorOf(BILLING_ERRORS, 'insufficient_credits');
/** The member's (or the token's) budget for this period cannot cover the call. */
export const memberBudgetExhausted = () =>
  errorOf(BILLING_ERRORS, 'MEMBER_BUDGET_EXHAUSTED', undefined, {
    headers: { 'x-should-retry': 'false' },
  });
const duplicateRequest = () => errorOf(BILLING_ERRORS, 'DUPLICATE_REQUEST');

/**
 * Holds min(maxCredits, available) on each org's allocation, for many calls in one statement
 * (svc_reserve_holds in src/db/custom/model-path-functions.sql: expired holds released, accounts locked in
 * ascending order, one org's requests served in input order). Per input: the tokens held, or 402
 * `insufficient_credits` when the allocation cannot cover minCredits, even if the owner still has
 * unallocated tokens (interface document, Billing rule 5), or 409 `duplicate_request` when the request id
 * already has a hold.
 */
/** Whole tokens a hold asks for: at least ⌈min⌉ (never below 0), at most ⌊max⌋ but never below that. */
export function holdBounds(input: { minCredits: number; maxCredits: number }): { lo: number; hi: number } {
  const lo = Math.max(0, Math.ceil(input.minCredits));
  return { lo, hi: Math.max(lo, Math.floor(input.maxCredits)) };
}

// svc_reserve_holds with the members' budgets (src/db/custom/member-budgets.sql).
const RESERVE = `select ord, take, outcome from svc_reserve_budgeted(
  $1::text[], $2::text[], $3::text[], $4::int[], $5::bigint[], $6::bigint[], $7::float8[])`;

export async function reserveMany(
  db: Db,
  inputs: ReserveInput[],
): Promise<({ heldCredits: number } | AppError)[]> {
  const bounds = inputs.map(holdBounds);
  let rows: {
    ord: number;
    take: unknown;
    outcome: 'held' | 'insufficient' | 'duplicate' | 'budget_exhausted';
  }[];
  try {
    rows = await retryOnDeadlock(() =>
      namedRows(db, 'svc_reserve', RESERVE, [
        inputs.map((i) => i.requestId),
        inputs.map((i) => i.orgKey),
        inputs.map((i) => i.userId),
        inputs.map((i) => i.apiTokenId ?? null),
        bounds.map((b) => b.lo),
        bounds.map((b) => b.hi),
        inputs.map((i) => i.ttlSeconds ?? DEFAULT_HOLD_TTL_SECONDS),
      ]),
    );
  } catch (err) {
    // Two reserves racing with one request id both saw it free and meet at the hold's primary key: the
    // loser's statement fails whole (nothing held). Alone, that is its answer; in a batch, the batcher
    // runs the inputs one by one to find it (ModelServices.spend, isolateFailures).
    if (pgCode(err) === '23505' && inputs.length === 1) return [duplicateRequest()];
    throw err;
  }
  // Every input gets a row; an input without one (its client has no account) cannot pay.
  const out = new Array<{ heldCredits: number } | AppError | undefined>(inputs.length);
  for (const row of rows) {
    const n = Number(row.ord) - 1;
    out[n] =
      row.outcome === 'held'
        ? { heldCredits: num(row.take) }
        : row.outcome === 'duplicate'
          ? duplicateRequest()
          : row.outcome === 'budget_exhausted'
            ? memberBudgetExhausted()
            : insufficientCredits();
  }
  // A budget's first refusal of a period is told to the owner's endpoints.
  inputs.forEach((input, n) => {
    if (out[n] instanceof AppError && out[n].code === 'MEMBER_BUDGET_EXHAUSTED')
      void noteBudgetExhausted(db, {
        orgKey: input.orgKey,
        userId: input.userId,
        apiTokenId: input.apiTokenId ?? null,
        least: bounds[n]!.lo,
      }).catch(() => {}); // the next refusal tries again (the period stays unmarked)
  });
  return Array.from(out, (r) => r ?? insufficientCredits());
}

/** reserveMany for one call: its hold, or the AppError thrown. */
export async function reserveCredits(db: Db, input: ReserveInput): Promise<{ heldCredits: number }> {
  const [result] = await reserveMany(db, [input]);
  if (result instanceof Error) throw result;
  return result!;
}

interface HoldRow {
  account_id: string;
  org_key: string;
  amount: unknown;
  status: string;
  debited: unknown;
}

export interface SettleInput {
  requestId: string;
  actualCredits: number;
  description: string;
  /** Also take the org's next hold in the same statement (src/models/admission/spare-holds.ts). */
  next?: NextHoldInput;
  /** The call's usage record, written by the settle itself (src/db/custom/usage-records.sql). */
  usage?: UsageRecordInput;
}

/** A usage record as svc_record_usage reads it (src/db/tables/usage.ts); the debit comes from the settle. */
export interface UsageRecordInput {
  org: string;
  user: string;
  api_token_id: number | null;
  oauth_grant_id: string | null;
  oauth_client_id: string | null;
  source: 'chat' | 'run';
  run_id: string | null;
  model: string;
  prompt_tokens: number;
  completion_tokens: number;
  /**
   * Of prompt_tokens, those the provider served from its cache (clamped: src/models/metering/pricing.ts), priced
   * at price_cached_input. Absent (a settle spooled by an older version): none, at price_input.
   */
  cached_prompt_tokens?: number;
  /** Cents per million tokens, as the call was priced: the exact cost is worked out in SQL numerics. */
  price_input: number;
  price_output: number;
  price_cached_input?: number;
  duration_ms: number;
  outcome: 'completed' | 'estimated' | 'aborted';
}

const usageJson = (inputs: SettleInput[]) => JSON.stringify(inputs.map((i) => i.usage ?? null));

/**
 * A hold of exactly `amount` tokens of org `orgKey` for no user, taken by a settle only when it leaves
 * the org a balance of at least `floor` (svc_settle_holds, src/db/custom/model-path-functions.sql).
 */
export interface NextHoldInput {
  requestId: string;
  orgKey: string;
  amount: number;
  floor: number;
}

export interface SettleResult {
  debitedCredits: number;
  balanceCredits: number;
  /** When the input asked for a next hold: the tokens it holds (0: not taken). */
  nextHeldCredits?: number;
}

/**
 * Debits min(actualCredits, held) and releases the rest, exactly once per request id, for many calls in
 * one statement (svc_settle_holds, which also takes the next hold an input asks for and writes the
 * usage records); one `usage` transaction per call that debited something. A repeated
 * settle returns the first result. A hold that expired before its settle (a very slow call) still debits
 * what the allocation can pay, never more. Per input: the result, or an AppError (404 no such hold).
 */
export async function settleMany(db: Db, inputs: SettleInput[]): Promise<(SettleResult | AppError)[]> {
  const rows = await settleStatement(db, inputs);
  const out: (SettleResult | AppError | null)[] = inputs.map(() => null);
  for (const row of rows) {
    if (!row.settled) continue;
    const input = inputs[Number(row.ord) - 1]!;
    out[Number(row.ord) - 1] = {
      debitedCredits: num(row.debited),
      balanceCredits: num(row.balance),
      ...(input.next ? { nextHeldCredits: num(row.next_held) } : {}),
    };
  }
  // Holds that were not live (settled or voided before, expired, unknown) are rare: one by one, and
  // they take no next hold.
  for (let n = 0; n < inputs.length; n++) {
    if (out[n]) continue;
    const input = inputs[n]!;
    out[n] = await settleNotLive(db, { ...input, next: undefined }).then(
      (result) => (input.next ? { ...result, nextHeldCredits: 0 } : result),
      (err: unknown) => {
        if (err instanceof AppError) return err;
        throw err;
      },
    );
  }
  return out as (SettleResult | AppError)[];
}

const SETTLE = `select ord, debited, balance, settled, next_held from svc_settle_holds(
  $1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::float8, $9::jsonb)`;

function settleStatement(db: Db, inputs: SettleInput[]) {
  const next = inputs.map((i) => i.next);
  return retryOnDeadlock(() =>
    namedRows<{ ord: number; debited: unknown; balance: unknown; settled: boolean; next_held: unknown }>(
      db,
      'svc_settle',
      SETTLE,
      [
        inputs.map((i) => i.requestId),
        inputs.map((i) => Math.max(0, Math.round(i.actualCredits))),
        inputs.map((i) => i.description),
        next.map((n) => n?.requestId ?? null),
        next.map((n) => n?.orgKey ?? null),
        next.map((n) => (n ? Math.max(0, Math.round(n.amount)) : null)),
        next.map((n) => (n ? Math.ceil(n.floor) : null)),
        DEFAULT_HOLD_TTL_SECONDS,
        usageJson(inputs),
      ],
    ),
  );
}

/**
 * Every billing path locks in one order (docs/contributing/billing-internals.md "Lock order"; a reserve's release of expired holds
 * skips rows others have locked), so no deadlock (40P01) is expected; retryOnDeadlock (src/db/deadlock.ts)
 * stays as a guard and runs a rolled-back batch once more.
 */
export { retryOnDeadlock };

/** settleMany for one call: its result, or the AppError thrown. */
export async function settleCredits(db: Db, input: SettleInput): Promise<SettleResult> {
  const [result] = await settleMany(db, [input]);
  if (result instanceof Error) throw result;
  return result!;
}

/** A settle that found no live hold: the first result stands, or an expired hold takes what is left. */
async function settleNotLive(db: Db, input: SettleInput): Promise<SettleResult> {
  const actual = Math.max(0, Math.round(input.actualCredits));
  return transaction(db, async (t) => {
    const [hold] = await queryRows<HoldRow>(
      t,
      sql`select account_id, org_key, amount, status, debited from billing_holds where request_id = ${input.requestId} for update`,
    );
    if (!hold) throw errorOf(BILLING_ERRORS, 'HOLD_NOT_FOUND');
    if (hold.status === 'held') {
      // Its reserve committed after the batch looked (a settle racing its own reserve): settle it now,
      // under the lock this transaction already holds.
      const [row] = await settleStatement(t, [input]);
      return { debitedCredits: num(row?.debited), balanceCredits: num(row?.balance) };
    }
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
    await t.execute(
      sql`select svc_record_usage(array[${input.requestId}]::text[], ${usageJson([input])}::jsonb, array[${debit}]::bigint[], array[true])`,
    );
    return { debitedCredits: debit, balanceCredits: balance };
  });
}

/** Debits the org (releasing `release` held tokens), credits its usage sink, writes the `usage` row. */
async function debitAccount(
  t: Db,
  requestId: string,
  hold: HoldRow,
  debit: number,
  release: number,
  description: string,
): Promise<number> {
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
  // The sink after the org row: the same ascending lock order as every other transaction. The ledger
  // has no foreign key to its accounts (decision 0138), so a missing sink fails the settle here.
  if (debit > 0) {
    const credited = await queryRows<{ id: string }>(
      t,
      sql`update billing_accounts set balance = balance + ${debit} where id = ${sink} returning id`,
    );
    if (credited.length === 0) throw new Error(`unknown ledger account ${sink}`);
  }
  return num(row?.balance);
}

/**
 * Holds given back whole, in one round trip (svc_void_holds, model-path-functions.sql): their rows, then
 * each account's `held` lowered once by their sum (a deadlock is retried); a hold no longer held is
 * skipped (idempotent). `flush: false` commits without waiting for the WAL flush, for holds nobody will
 * settle (spares: decision 0170): a void a crash forgets leaves its hold to expire. Returns the tokens.
 */
export async function voidHolds(db: Db, requestIds: string[], { flush } = { flush: true }): Promise<number> {
  if (requestIds.length === 0) return 0;
  const [row] = await retryOnDeadlock(() =>
    namedRows<{ released: unknown }>(db, 'svc_void_holds', VOID_HOLDS, [requestIds, flush]),
  );
  return num(row?.released);
}

const VOID_HOLDS = 'select svc_void_holds($1::text[], $2::boolean) as released';

/** Releases a hold without debiting (a failed upstream call debits nothing). Idempotent. */
export async function voidHold(db: Db, requestId: string): Promise<{ releasedCredits: number }> {
  return { releasedCredits: await voidHolds(db, [requestId]) };
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
    released += await transaction(db, (tx) => releaseExpiredHolds(tx, account_id));
  }
  return released;
}
