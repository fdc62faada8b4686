import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import type { Logger } from '../log.js';
import { excessCalls, excessDebitedCredits, excessDebtCredits } from '../metrics/registry.js';
import {
  debtAccount,
  ensureDebtAccount,
  lockAccounts,
  sinkAccount,
  transfer,
  type EntryType,
} from './ledger.js';
import { settleCredits, type SettleInput, type SettleResult } from './spend.js';
import { transaction } from '../db/transaction.js';

// The owner's debt (CONTRACT §8 "Debt"): tokens an owner owes because they were spent and could not be
// taken back — the part of a refund or lost dispute that no balance of the owner's could give
// (payment-reversals.ts), and usage a provider reported beyond a call's hold that the client's balance
// could not pay (chargeExcess below).
//
// One ledger account per owner, `debt:<user id>`, outside the owner's balances (global_credits is the
// pool plus the clients). Its balance is minus what is owed, so debt is recorded and paid by ordinary
// ledger movements and every token stays accounted for:
//   recorded:  debt:<owner> → where the tokens went (src:purchases for a take-back, the usage sink)
//   paid:      pool:<owner> → debt:<owner>, by every later grant before it is allocated (ledger.ts)
// `debt:` sorts before `org:`, `pool:`, `sink:` and `src:`, so locking it first keeps the global order.

/** What the owner owes (≥ 0). */
export async function debtOf(db: Db, userId: string): Promise<number> {
  const [row] = await queryRows<{ balance: unknown }>(
    db,
    sql`select balance from billing_accounts where id = ${debtAccount(userId)}`,
  );
  return debtFromBalance(row?.balance);
}

/** What the owner owes, from the debt account's balance (negative while they owe). */
export const debtFromBalance = (balance: unknown): number => Math.max(0, -Number(balance ?? 0));

/** Records `amount` as the owner's debt, the tokens going to `to` (the caller locked the accounts in order). */
export async function recordDebt(
  tx: Db,
  input: {
    key: string;
    ownerId: string;
    to: string;
    amount: number;
    type: EntryType;
    description: string;
  },
): Promise<void> {
  if (input.amount <= 0) return;
  await transfer(tx, {
    key: input.key,
    from: debtAccount(input.ownerId),
    to: input.to,
    amount: input.amount,
    type: input.type,
    description: input.description,
  });
}

/**
 * A provider reported more than the call's hold covered (CONTRACT §8 "Should a provider still report
 * more than the hold covered"): the excess (`actualCredits` less what the settle debited) is debited from
 * the unheld balance of the account the hold was on — the client's, or its owner's pool when the client
 * was deleted during the call (deleted-client.ts) — as far as it goes (a `usage` row keyed
 * `usage:<request id>:excess`), and the rest is recorded as the owner's debt (keyed `…:debt`), never lost.
 *
 * Exactly once per request id, whichever path settles the call (the call itself, or a settle kept and
 * retried after a database cut or replayed from the spool, src/models/metering/pending-settles.ts): it reads what
 * the settled hold debited, and under the accounts' locks looks for either row of an earlier charge, so a
 * repeat (a retry whose first attempt committed, a spool replayed twice) charges nothing, even when the
 * balance has changed since. Logged and counted each time it charges.
 */
export async function chargeExcess(
  db: Db,
  log: Logger,
  input: { requestId: string; actualCredits: number; description: string },
): Promise<{ debited: number; debt: number }> {
  const actual = Math.max(0, Math.round(input.actualCredits));
  const none = { debited: 0, debt: 0, excess: 0, orgKey: '' };
  const result = await transaction(db, async (t) => {
    // Hold rows first, as every billing transaction locks.
    const [hold] = await queryRows<{
      account_id: string;
      org_key: string;
      user_id: string | null;
      debited: unknown;
      status: string;
    }>(
      t,
      sql`select account_id, org_key, user_id, debited, status from billing_holds where request_id = ${input.requestId} for update`,
    );
    if (!hold || hold.status !== 'settled' || actual <= Number(hold.debited)) return none;
    const excess = actual - Number(hold.debited);
    const [org] = await queryRows<{ owner_id: string }>(
      t,
      sql`select owner_id from orgs where id = ${hold.org_key}`,
    );
    if (!org) return none;
    await ensureDebtAccount(t, org.owner_id);
    const account = hold.account_id;
    const sink = sinkAccount(hold.org_key);
    const locked = await lockAccounts(t, [debtAccount(org.owner_id), account, sink]);
    const keys = [`usage:${input.requestId}:excess`, `usage:${input.requestId}:debt`];
    const [before] = await queryRows<{ n: unknown }>(
      t,
      sql`select count(*)::int as n from billing_entries where key in (${keys[0]}, ${keys[1]})`,
    );
    if (Number(before?.n) > 0) return none; // charged before
    const a = locked.get(account);
    const debited = Math.min(excess, Math.max(0, (a?.balance ?? 0) - (a?.held ?? 0)));
    if (debited > 0) {
      await transfer(t, {
        key: keys[0]!,
        from: account,
        to: sink,
        amount: debited,
        type: 'usage',
        description: `${input.description} (beyond its hold)`,
        shownTo: { orgKey: hold.org_key, side: 'from' },
      });
    }
    const debt = excess - debited;
    await recordDebt(t, {
      key: keys[1]!,
      ownerId: org.owner_id,
      to: sink,
      amount: debt,
      type: 'debt',
      description: `${input.description} (beyond its hold and the balance: owed)`,
    });
    if (hold.user_id)
      await chargeBudgets(t, {
        requestId: input.requestId,
        orgKey: hold.org_key,
        userId: hold.user_id,
        excess,
      });
    return { debited, debt, excess, orgKey: hold.org_key };
  });
  if (result.excess > 0) {
    // This process's counters, at /metrics (docs/operations.md § Metrics).
    excessCalls.inc();
    excessDebitedCredits.inc(result.debited);
    excessDebtCredits.inc(result.debt);
    log.warn(
      {
        requestId: input.requestId,
        orgKey: result.orgKey,
        excess: result.excess,
        debited: result.debited,
        debt: result.debt,
      },
      'provider usage beyond the hold: excess debited, the rest recorded as debt',
    );
  }
  return { debited: result.debited, debt: result.debt };
}

/**
 * The excess counts against the member's and the credential's budgets like any debit (CONTRACT §9): a
 * negative return on this period's rows of both, folded into their use by the next hold, as a settle's
 * give-back is (src/db/custom/member-budgets.sql: a settle only appends, never waits for a budget).
 */
async function chargeBudgets(
  db: Db,
  input: { requestId: string; orgKey: string; userId: string; excess: number },
): Promise<void> {
  await db.execute(
    sql`insert into member_budget_returns (usage_id, amount)
        select u.id, ${-input.excess}::bigint from member_budgets b
        join member_budget_usage u on u.budget_id = b.id and u.period_start = svc_budget_period_start(b.period, now())
        where b.org_key = ${input.orgKey} and b.cleared_at is null
          and ((b.api_token_id is null and b.user_id = ${input.userId})
               or b.api_token_id = (select r.api_token_id from usage_records r where r.request_id = ${input.requestId}))`,
  );
}

/**
 * A settle, then the excess beyond its hold when there is one (chargeExcess): the one way every settle
 * path bills a call whole. Used by settles kept and retried (src/models/services.ts); the call's own
 * settle goes through the batcher and calls chargeExcess itself (src/models/metering/metered.ts).
 */
export async function settleWithExcess(db: Db, log: Logger, input: SettleInput): Promise<SettleResult> {
  const settled = await settleCredits(db, input);
  if (Math.round(input.actualCredits) <= settled.debitedCredits) return settled;
  const excess = await chargeExcess(db, log, input);
  return {
    ...settled,
    debitedCredits: settled.debitedCredits + excess.debited,
    balanceCredits: settled.balanceCredits - excess.debited,
  };
}
