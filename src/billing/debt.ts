import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import type { Logger } from '../log.js';
import {
  debtAccount,
  ensureDebtAccount,
  lockAccounts,
  orgAccount,
  sinkAccount,
  transfer,
  type EntryType,
} from './ledger.js';

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
  return Math.max(0, -Number(row?.balance ?? 0));
}

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

/** Calls whose provider reported more than their hold covered, and the tokens involved (this process). */
export const excessCounters = { calls: 0, debitedCredits: 0, debtCredits: 0 };

/**
 * A provider reported more than the call's hold covered (CONTRACT §8 "Should a provider still report
 * more than the hold covered"): the excess is debited from the client's unheld balance as far as it
 * goes (a `usage` row keyed `usage:<request id>:excess`) and the rest is recorded as the owner's debt
 * (keyed `…:debt`), never lost. Exactly once per request id; logged and counted every time.
 */
export async function chargeExcess(
  db: Db,
  log: Logger,
  input: { requestId: string; orgKey: string; excess: number; description: string },
): Promise<{ debited: number; debt: number }> {
  if (input.excess <= 0) return { debited: 0, debt: 0 };
  const result = await db.transaction(async (tx) => {
    const t = tx as unknown as Db;
    const [org] = await queryRows<{ owner_id: string }>(
      t,
      sql`select owner_id from orgs where id = ${input.orgKey}`,
    );
    if (!org) return { debited: 0, debt: 0 };
    await ensureDebtAccount(t, org.owner_id);
    const account = orgAccount(input.orgKey);
    const sink = sinkAccount(input.orgKey);
    const locked = await lockAccounts(t, [debtAccount(org.owner_id), account, sink]);
    const a = locked.get(account);
    const debited = Math.min(input.excess, Math.max(0, (a?.balance ?? 0) - (a?.held ?? 0)));
    if (debited > 0) {
      const id = await transfer(t, {
        key: `usage:${input.requestId}:excess`,
        from: account,
        to: sink,
        amount: debited,
        type: 'usage',
        description: `${input.description} (beyond its hold)`,
        shownTo: { orgKey: input.orgKey, side: 'from' },
      });
      if (id === null) return { debited: 0, debt: 0 }; // charged before
    }
    const debt = input.excess - debited;
    await recordDebt(t, {
      key: `usage:${input.requestId}:debt`,
      ownerId: org.owner_id,
      to: sink,
      amount: debt,
      type: 'debt',
      description: `${input.description} (beyond its hold and the balance: owed)`,
    });
    return { debited, debt };
  });
  excessCounters.calls++;
  excessCounters.debitedCredits += result.debited;
  excessCounters.debtCredits += result.debt;
  log.warn(
    { requestId: input.requestId, orgKey: input.orgKey, excess: input.excess, ...result },
    'provider usage beyond the hold: excess debited, the rest recorded as debt',
  );
  return result;
}
