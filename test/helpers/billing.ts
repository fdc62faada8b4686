import { randomUUID } from 'node:crypto';
import { eq, sql } from 'drizzle-orm';
import { queryRows, type Db } from '../../src/db/client.js';
import { orgs } from '../../src/db/schema.js';
import {
  accountBalance,
  ensureOrgAccounts,
  orgAccount,
  poolAccount,
  SOURCE_PURCHASES,
  transfer,
} from '../../src/billing/ledger.js';
import { setAllocation } from '../../src/billing/service.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import type { TestServer } from './server.js';

// Billing fixtures go through the real ledger and allocation code (never around them).

/**
 * A hold's time to live for one that has already expired when the next statement looks. Not 0: PGlite's
 * clock moves in whole milliseconds, so a hold that expires "now" can still be live for the statement
 * after it (`expires_at < now()` false on an equal now()).
 */
export const EXPIRED = -1;

/**
 * Sets a client's token balance to exactly `credits`: the owner's pool is topped up through the ledger
 * when it cannot fund the raise, then the real allocation code moves the difference.
 */
export async function setOrgBalance(server: TestServer, orgKey: string, credits: number): Promise<void> {
  const db = server.deps.db;
  const [org] = await db.select().from(orgs).where(eq(orgs.id, orgKey));
  if (!org) throw new Error(`setOrgBalance: no org ${orgKey}`);
  await db.transaction(async (tx) => {
    const t = tx as unknown as Db;
    await ensureOrgAccounts(t, orgKey, org.ownerId);
    const current = (await accountBalance(t, orgAccount(orgKey)))!.balance;
    const pool = (await accountBalance(t, poolAccount(org.ownerId)))!.balance;
    const missing = credits - current - pool;
    if (missing > 0) {
      await transfer(t, {
        key: `test:grant:${randomUUID()}`,
        from: SOURCE_PURCHASES,
        to: poolAccount(org.ownerId),
        amount: missing,
        type: 'topup',
        description: 'test fixture grant',
      });
    }
  });
  // As PUT …/allocation does (src/billing/routes.ts): a hold taken ahead for the org's next call goes back first.
  await server.deps.models.spares.release(orgKey);
  await setAllocation(db, { userId: org.ownerId, orgKey, target: credits, origin: SYSTEM_ORIGIN });
}

/** A client's ledger account as stored: its balance and the tokens held for calls in flight. */
export async function orgAccountRow(
  server: TestServer,
  orgKey: string,
): Promise<{ balance: number; held: number }> {
  const [row] = await queryRows<{ balance: unknown; held: unknown }>(
    server.deps.db,
    sql`select balance, held from billing_accounts where id = ${orgAccount(orgKey)}`,
  );
  return { balance: Number(row!.balance), held: Number(row!.held) };
}
