import type { PgTransactionConfig } from 'drizzle-orm/pg-core';
import type { Db } from './client.js';

// Every transaction of src/ opens here (an ESLint rule forbids `.transaction(` elsewhere), so work that
// must come last in a transaction can be collected while it runs and written once, just before COMMIT.
//
// The one such work today is the audit log (CONTRACT §11): appending to an organization's chain takes
// the chain's lock, and a lock taken in the middle of a transaction that goes on to lock ledger accounts
// meets another transaction that locked the accounts first and wants the chain (a deadlock). Written
// last, the chain's lock is the last one any transaction takes.

/** Work a transaction collects while it runs and writes once, last, before it commits. */
export interface BeforeCommit<T> {
  /** Names the work in the error a transaction not opened here gets. */
  readonly name: string;
  /** Writes everything collected, in the order it was added, in the outermost transaction. */
  write(tx: Db, items: T[]): Promise<void>;
}

/** What one transaction (or one savepoint in it) has collected, per kind of work. */
type Collected = Map<BeforeCommit<never>, unknown[]>;

const collectedBy = new WeakMap<object, Collected>();

/**
 * Runs `fn` in a transaction of `db` (a savepoint when `db` is itself a transaction opened here). What a
 * savepoint collected joins its parent's when the savepoint is released and is dropped with it when it
 * rolls back; the outermost transaction writes it all after `fn` returns, before it commits.
 */
export async function transaction<T>(
  db: Db,
  fn: (tx: Db) => Promise<T>,
  config?: PgTransactionConfig,
): Promise<T> {
  const parent = collectedBy.get(db);
  return db.transaction(async (driverTx) => {
    const tx = driverTx as unknown as Db;
    const collected: Collected = new Map();
    collectedBy.set(tx, collected);
    const result = await fn(tx);
    if (parent) {
      for (const [work, items] of collected) parent.set(work, [...(parent.get(work) ?? []), ...items]);
    } else {
      for (const [work, items] of collected) await (work as BeforeCommit<unknown>).write(tx, items);
    }
    return result;
  }, config);
}

/** True when `db` is a transaction opened by `transaction` (so `beforeCommit` may add to it). */
export function isTransaction(db: Db): boolean {
  return collectedBy.has(db);
}

/** Adds `item` to what `work` writes when `tx` commits. */
export function beforeCommit<T>(tx: Db, work: BeforeCommit<T>, item: T): void {
  const collected = collectedBy.get(tx);
  if (!collected) throw new Error(`${work.name} needs a transaction opened by src/db/transaction.ts`);
  const items = collected.get(work);
  if (items) items.push(item);
  else collected.set(work, [item]);
}
