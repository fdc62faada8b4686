import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { pgCode } from '../db/deadlock.js';
import { errorOf } from '../http/errors.js';
import { BILLING_ERRORS } from './errors.js';
import { ensureOrgAccounts, lockAccounts, orgAccount, poolAccount, transfer } from './ledger.js';
import { transaction } from '../db/transaction.js';

// Deleting a client with calls in flight (CONTRACT §8 "A client is deleted only with its calls settled").
// The deletion stops new calls at once (its credentials are revoked in the same
// transaction, and an org account of balance 0 answers every later reserve 402), but the calls already
// running keep their holds: the provider's work is real cost, and each of them is billed for what it
// delivered, exactly once, by its own settle.
//
// So the holds move with the tokens. In the deletion's transaction the client's whole balance goes back to
// its owner's pool (one `reclaim` row, `reclaim:deleted:<org>`), and each live hold of the client is
// re-pointed at the pool (`billing_holds.account_id`, the pool's `held` raised by as much). From then on
// the hold is an ordinary hold on the pool to every settle, void and expiry (they all work on the hold's
// account, src/billing/spend.ts and src/db/custom/model-path-functions.sql): a settle debits the pool
// into the deleted client's usage sink (the `usage` row still names the client) and releases the rest in
// the pool; a failed call's void gives the whole hold back to the pool. The pool's held tokens cannot be
// allocated or taken back meanwhile (every movement checks balance − held), and the client's account is
// left at 0, as the invariant "a deleted client holds no tokens" says. No step waits and nothing is
// swept later: the balance is in the pool, available as each call settles.

/** Attempts at a consistent set of the client's holds before the deletion gives up (409, try again). */
const RECLAIM_ATTEMPTS = 20;

/**
 * Org-deleted hook (inside the deletion's transaction; src/orgs/service.ts deleteClient).
 *
 * Lock order as every billing path takes it (docs/contributing/billing-internals.md "Lock order"): hold rows first, then the
 * accounts ascending. The client's live holds are locked, then its account and the pool. A reserve may
 * have committed a hold between the two (a reserve inserts under the account's lock, so none can come
 * once this holds it): such late holds are locked without waiting (NOWAIT). When one is already locked, a
 * settle or void of it is waiting for the account this holds, and waiting for it in turn would be the
 * deadlock the concurrent property test met: instead the attempt is rolled back to its
 * savepoint, which releases its locks, and the next attempt waits for that hold in the right order.
 */
export async function reclaimDeletedOrg(tx: Db, org: { orgKey: string; ownerId: string }): Promise<void> {
  await ensureOrgAccounts(tx, org.orgKey, org.ownerId);
  for (let attempt = 1; ; attempt++) {
    try {
      await transaction(tx, (sp) => reclaim(sp, org));
      return;
    } catch (err) {
      // 55P03 lock_not_available: a late hold is being settled right now.
      if (pgCode(err) !== '55P03') throw err;
      if (attempt >= RECLAIM_ATTEMPTS)
        throw errorOf(
          BILLING_ERRORS,
          'CREDITS_IN_USE',
          "the client's calls are settling right now; try again",
        );
    }
  }
}

/** One attempt, inside its own savepoint. */
async function reclaim(tx: Db, org: { orgKey: string; ownerId: string }): Promise<void> {
  const account = orgAccount(org.orgKey);
  const pool = poolAccount(org.ownerId);
  const first = await queryRows<{ request_id: string }>(
    tx,
    sql`select request_id from billing_holds where account_id = ${account} and status = 'held'
        order by request_id for update`,
  );
  const locked = await lockAccounts(tx, [account, pool]);
  await tx.execute(
    sql`select request_id from billing_holds
        where account_id = ${account} and status = 'held'
          and request_id <> all(${sql.param(first.map((h) => h.request_id))}::text[])
        order by request_id for update nowait`,
  );
  // Holds name their account without a foreign key (decision 0139): they move only to a pool locked here.
  if (!locked.has(pool)) throw new Error(`unknown ledger account ${pool}`);
  const balance = locked.get(account)!.balance;
  // Every live hold of the client is locked by now, and no reserve can add one: re-point them all.
  const moved = await queryRows<{ amount: unknown }>(
    tx,
    sql`update billing_holds set account_id = ${pool} where account_id = ${account} and status = 'held'
        returning amount`,
  );
  const held = moved.reduce((s, h) => s + Number(h.amount), 0);
  // The client's `held` first (so its whole balance is free to move), the pool's last (its balance then
  // covers it: CHECK balance >= held holds after every statement).
  if (held > 0)
    await tx.execute(sql`update billing_accounts set held = held - ${held} where id = ${account}`);
  if (balance > 0) {
    await transfer(tx, {
      key: `reclaim:deleted:${org.orgKey}`,
      from: account,
      to: pool,
      amount: balance,
      type: 'reclaim',
      description:
        held > 0 ? `Client deleted (${held} tokens held for its calls in flight)` : 'Client deleted',
      shownTo: { orgKey: org.orgKey, side: 'from' },
    });
  }
  if (held > 0) await tx.execute(sql`update billing_accounts set held = held + ${held} where id = ${pool}`);
  await tx.execute(sql`update billing_accounts set allocation = 0 where id = ${account}`);
}
