import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import type { ENTRY_TYPES } from '../db/schema.js';

// The ledger core: accounts and one immutable row per movement (STYLE "State that must not race":
// the row is keyed by an idempotency key and inserted ON CONFLICT DO NOTHING in the same transaction
// as the conditional balance update; rows are locked in a fixed order, ascending account id).
// Nothing outside this file writes billing_entries or billing_accounts.balance.

export const orgAccount = (orgKey: string) => `org:${orgKey}`;
export const poolAccount = (userId: string) => `pool:${userId}`;
export const sinkAccount = (orgKey: string) => `sink:${orgKey}`;
/** Minus what an owner owes (src/billing/debt.ts): sorts before every other account, so it is locked first. */
export const debtAccount = (userId: string) => `debt:${userId}`;
export const SOURCE_TRIAL = 'src:trial';
export const SOURCE_PURCHASES = 'src:purchases';

export type EntryType = (typeof ENTRY_TYPES)[number];

/** Thrown inside a transaction when an inside account cannot pay; callers map it to their 402. */
export class InsufficientFunds extends Error {
  constructor(readonly accountId: string) {
    super(`account ${accountId} cannot cover the movement`);
    this.name = 'InsufficientFunds';
  }
}

interface AccountRow {
  id: string;
  kind: string;
  balance: number;
  held: number;
  allocation: number;
}

const num = (v: unknown): number => Number(v ?? 0);

/** Creates the accounts a client needs (its allocation, its usage sink, its owner's pool). */
export async function ensureOrgAccounts(tx: Db, orgKey: string, ownerId: string): Promise<void> {
  await tx.execute(sql`
    insert into billing_accounts (id, kind, user_id, org_key) values
      (${orgAccount(orgKey)}, 'org', ${ownerId}, ${orgKey}),
      (${poolAccount(ownerId)}, 'pool', ${ownerId}, null),
      (${sinkAccount(orgKey)}, 'sink', ${ownerId}, ${orgKey}),
      (${SOURCE_TRIAL}, 'source', null, null),
      (${SOURCE_PURCHASES}, 'source', null, null)
    on conflict (id) do nothing`);
}

export async function ensureDebtAccount(tx: Db, userId: string): Promise<void> {
  await tx.execute(sql`
    insert into billing_accounts (id, kind, user_id) values (${debtAccount(userId)}, 'debt', ${userId})
    on conflict (id) do nothing`);
}

export async function ensurePool(tx: Db, userId: string): Promise<void> {
  await tx.execute(sql`
    insert into billing_accounts (id, kind, user_id) values (${poolAccount(userId)}, 'pool', ${userId})
    on conflict (id) do nothing`);
}

/** Locks the given accounts in ascending id order (the one order every transaction uses). */
export async function lockAccounts(tx: Db, ids: string[]): Promise<Map<string, AccountRow>> {
  const sorted = [...new Set(ids)].sort();
  // ORDER BY … FOR UPDATE: PostgreSQL locks the rows in the sorted order.
  const rows = await queryRows<AccountRow>(
    tx,
    sql`select id, kind, balance, held, allocation from billing_accounts
        where id in (${sql.join(
          sorted.map((id) => sql`${id}`),
          sql`, `,
        )}) order by id for update`,
  );
  return new Map(
    rows.map((r) => [
      r.id,
      { ...r, balance: num(r.balance), held: num(r.held), allocation: num(r.allocation) },
    ]),
  );
}

export interface TransferInput {
  key: string;
  from: string;
  to: string;
  amount: number;
  type: EntryType;
  description?: string;
  /** The client whose transaction list shows the row, and on which side of the movement it is. */
  shownTo?: { orgKey: string; side: 'from' | 'to' };
}

/**
 * Moves `amount` between two accounts exactly once per `key`. Returns the entry id, or null when the
 * key was already used (the movement happened before; nothing changes). Throws InsufficientFunds when
 * an inside account would go below zero (holds included).
 */
export async function transfer(tx: Db, input: TransferInput): Promise<number | null> {
  if (!Number.isSafeInteger(input.amount) || input.amount <= 0)
    throw new Error('transfer amount must be a positive integer');
  const accounts = await lockAccounts(tx, [input.from, input.to]);
  const from = accounts.get(input.from);
  const to = accounts.get(input.to);
  if (!from || !to) throw new Error(`unknown ledger account ${!from ? input.from : input.to}`);
  const inside = (a: AccountRow) => a.kind === 'org' || a.kind === 'pool';
  if (inside(from) && from.balance - from.held < input.amount) throw new InsufficientFunds(from.id);

  const shown = input.shownTo;
  const shownAfter = shown
    ? shown.side === 'to'
      ? to.balance + input.amount
      : from.balance - input.amount
    : null;
  const shownAmount = shown ? (shown.side === 'to' ? input.amount : -input.amount) : null;
  const inserted = await queryRows<{ id: number }>(
    tx,
    sql`insert into billing_entries (key, from_account, to_account, amount, type, org_key, org_amount, org_balance_after, description)
        values (${input.key}, ${input.from}, ${input.to}, ${input.amount}, ${input.type}, ${shown?.orgKey ?? null},
                ${shownAmount}, ${shownAfter}, ${input.description ?? ''})
        on conflict (key) do nothing returning id`,
  );
  if (inserted.length === 0) return null;
  // Conditional debit: the CHECK constraint and this WHERE both refuse to go below zero.
  const debited = await queryRows<{ id: string }>(
    tx,
    sql`update billing_accounts set balance = balance - ${input.amount}
        where id = ${input.from} and (kind not in ('org', 'pool') or balance - held >= ${input.amount}) returning id`,
  );
  if (debited.length === 0) throw new InsufficientFunds(input.from);
  await tx.execute(
    sql`update billing_accounts set balance = balance + ${input.amount} where id = ${input.to}`,
  );
  return num(inserted[0]!.id);
}

/**
 * A purchase or the trial: the owner's pool is credited, the owner's debt is paid from it first
 * (CONTRACT §8 "Every later grant pays the debt first"; keyed `<key>:debt`), and the rest is allocated at
 * once to the client it was bought through, all keyed by `key`. Returns false when already granted.
 */
export async function grantToOrg(
  tx: Db,
  g: {
    key: string;
    source: string;
    ownerId: string;
    orgKey: string;
    amount: number;
    type: EntryType;
    description: string;
  },
): Promise<boolean> {
  await ensureOrgAccounts(tx, g.orgKey, g.ownerId);
  await ensureDebtAccount(tx, g.ownerId);
  // All rows up front, in the global order, so the movements never lock out of order. The owner's other
  // live clients too: a take-back applied in this same transaction (a refund or dispute that arrived
  // before its payment: refunds.ts recordPayment) takes from them, and locking them only then would lock
  // `org:` rows after this `pool:` row (a deadlock the property test met with a concurrent deletion).
  const others = await queryRows<{ id: string }>(
    tx,
    sql`select id from orgs where owner_id = ${g.ownerId} and deleted_at is null`,
  );
  await lockAccounts(tx, [
    debtAccount(g.ownerId),
    g.source,
    poolAccount(g.ownerId),
    orgAccount(g.orgKey),
    ...others.map((o) => orgAccount(o.id)),
  ]);
  const granted = await transfer(tx, {
    key: g.key,
    from: g.source,
    to: poolAccount(g.ownerId),
    amount: g.amount,
    type: g.type,
    description: g.description,
  });
  if (granted === null) return false;
  const paid = await payDebt(tx, { key: `${g.key}:debt`, ownerId: g.ownerId, limit: g.amount });
  const allocated = g.amount - paid;
  if (allocated > 0) {
    await transfer(tx, {
      key: `${g.key}:allocate`,
      from: poolAccount(g.ownerId),
      to: orgAccount(g.orgKey),
      amount: allocated,
      type: g.type,
      description: paid > 0 ? `${g.description} (${paid} tokens paid the owner's debt first)` : g.description,
      shownTo: { orgKey: g.orgKey, side: 'to' },
    });
    await tx.execute(
      sql`update billing_accounts set allocation = allocation + ${allocated} where id = ${orgAccount(g.orgKey)}`,
    );
  }
  return true;
}

/**
 * Pays the owner's debt from their pool, at most `limit` (the grant that just arrived): every grant pays
 * the debt first (CONTRACT §8). Returns what was paid. The caller locked the debt account and the pool.
 */
export async function payDebt(
  tx: Db,
  input: { key: string; ownerId: string; limit: number },
): Promise<number> {
  const accounts = await lockAccounts(tx, [debtAccount(input.ownerId), poolAccount(input.ownerId)]);
  const debt = accounts.get(debtAccount(input.ownerId));
  const pool = accounts.get(poolAccount(input.ownerId));
  if (!debt || !pool) return 0;
  const pay = Math.min(input.limit, Math.max(0, -debt.balance), Math.max(0, pool.balance - pool.held));
  if (pay <= 0) return 0;
  await transfer(tx, {
    key: input.key,
    from: poolAccount(input.ownerId),
    to: debtAccount(input.ownerId),
    amount: pay,
    type: 'debt_payment',
    description: "Paid toward the owner's debt",
  });
  return pay;
}

/**
 * Tokens ever granted to an owner's pool (lifetime_granted_credits), derived from the ledger. A won
 * dispute's give-back to the pool (type `refund`, payment-reversals.ts) undoes a take-back that never
 * lowered this figure, so it does not raise it either. A subquery, for the statement that reads it, its pool's account given as `poolParam` (a placeholder: `$1`).
 */
export const lifetimeGrantedText = (poolParam: string) =>
  `(select coalesce(sum(amount), 0)::bigint from billing_entries
      where to_account = ${poolParam} and from_account like 'src:%' and type <> 'refund')`;

export async function accountBalance(
  db: Db,
  id: string,
): Promise<{ balance: number; held: number; allocation: number } | null> {
  const [row] = await queryRows<AccountRow>(
    db,
    sql`select id, kind, balance, held, allocation from billing_accounts where id = ${id}`,
  );
  return row ? { balance: num(row.balance), held: num(row.held), allocation: num(row.allocation) } : null;
}
