import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { eventually } from '../helpers/eventually.js';
import { createUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { queryRows } from '../../src/db/client.js';
import { reserveMany, settleMany } from '../../src/billing/spend.js';
import { setAllocation } from '../../src/billing/service.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import {
  balanceWatch,
  handleCrossings,
  setBalanceWatch,
  type BalanceCrossing,
} from '../../src/billing/balance-crossings.js';

// Balance alerts and auto top-up: "the balance of org X crossed below threshold T", recorded by the database in the
// transaction that moved the balance: once per crossing under concurrent settles, re-armed by a top-up.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

interface Row {
  purpose: string;
  threshold: unknown;
  balance_before: unknown;
  balance_after: unknown;
}
const crossings = (orgKey: string) =>
  queryRows<Row>(
    server.deps.db,
    sql`select purpose, threshold, balance_before, balance_after from balance_crossings where org_key = ${orgKey} order by id`,
  ).then((rows) =>
    rows.map((r) => ({
      purpose: r.purpose,
      threshold: Number(r.threshold),
      before: Number(r.balance_before),
      after: Number(r.balance_after),
    })),
  );

/** `n` calls of `cost` tokens each, all reserved first and then settled concurrently, one statement each. */
async function spendConcurrently(orgKey: string, userId: string, n: number, cost: number) {
  const ids = Array.from({ length: n }, () => `req_${randomUUID()}`);
  const holds = await Promise.all(
    ids.map((requestId) =>
      reserveMany(server.deps.db, [{ orgKey, userId, requestId, minCredits: cost, maxCredits: cost }]),
    ),
  );
  for (const [h] of holds) expect(h).not.toBeInstanceOf(Error);
  await Promise.all(
    ids.map((requestId) =>
      settleMany(server.deps.db, [{ requestId, actualCredits: cost, description: 'test call' }]),
    ),
  );
}

describe('balance crossings', () => {
  it('records nothing for an org nobody watches', async () => {
    const u = await createUser(server);
    await setOrgBalance(server, u.orgKey, 1_000);
    await spendConcurrently(u.orgKey, u.userId, 5, 200);
    expect(await crossings(u.orgKey)).toEqual([]);
  });

  it('records one crossing when 50 concurrent calls fall below the threshold together, and none after', async () => {
    const u = await createUser(server);
    await setOrgBalance(server, u.orgKey, 10_000);
    await setBalanceWatch(server.deps.db, u.orgKey, 'test.low', 6_000);
    expect(await balanceWatch(server.deps.db, u.orgKey, 'test.low')).toBe(6_000);
    // 10,000 → 5,000: the threshold is crossed by one of the 50 settles (or by a batch of them).
    await spendConcurrently(u.orgKey, u.userId, 50, 100);
    await spendConcurrently(u.orgKey, u.userId, 10, 100);
    const rows = await crossings(u.orgKey);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ purpose: 'test.low', threshold: 6_000 });
    expect(rows[0]!.before).toBeGreaterThanOrEqual(6_000);
    expect(rows[0]!.after).toBeLessThan(6_000);
  });

  it('is re-armed by a top-up above the threshold, and not by one that stays below it', async () => {
    const u = await createUser(server);
    await setOrgBalance(server, u.orgKey, 1_000);
    await setBalanceWatch(server.deps.db, u.orgKey, 'test.low', 500);
    await spendConcurrently(u.orgKey, u.userId, 6, 100); // 1,000 → 400: crossed
    await setOrgBalance(server, u.orgKey, 450); // raised, still below: not re-armed
    await spendConcurrently(u.orgKey, u.userId, 1, 100);
    expect(await crossings(u.orgKey)).toHaveLength(1);
    await setOrgBalance(server, u.orgKey, 500); // at the threshold again: armed
    await spendConcurrently(u.orgKey, u.userId, 1, 1);
    const rows = await crossings(u.orgKey);
    expect(rows).toHaveLength(2);
    expect(rows[0]!.before).toBeGreaterThanOrEqual(500);
    expect(rows[0]!.after).toBeLessThan(500);
    expect([rows[1]!.before, rows[1]!.after]).toEqual([500, 499]);
  });

  it('records each watched threshold crossed, whatever moved the balance (an allocation lowered)', async () => {
    const u = await createUser(server);
    await setOrgBalance(server, u.orgKey, 1_000);
    await setBalanceWatch(server.deps.db, u.orgKey, 'test.low', 800);
    await setBalanceWatch(server.deps.db, u.orgKey, 'test.exhausted', 1);
    await setBalanceWatch(server.deps.db, u.orgKey, 'test.far', 5_000); // already below: no crossing
    await setAllocation(server.deps.db, {
      userId: u.userId,
      orgKey: u.orgKey,
      target: 0,
      origin: SYSTEM_ORIGIN,
    });
    expect(await crossings(u.orgKey)).toEqual([
      { purpose: 'test.low', threshold: 800, before: 1_000, after: 0 },
      { purpose: 'test.exhausted', threshold: 1, before: 1_000, after: 0 },
    ]);
    // Unwatched: the account's copy of the thresholds goes with the watch.
    await setBalanceWatch(server.deps.db, u.orgKey, 'test.low', null);
    await setBalanceWatch(server.deps.db, u.orgKey, 'test.exhausted', null);
    await setBalanceWatch(server.deps.db, u.orgKey, 'test.far', null);
    const [acct] = await queryRows<{ watch_thresholds: unknown }>(
      server.deps.db,
      sql`select watch_thresholds from billing_accounts where id = ${`org:${u.orgKey}`}`,
    );
    expect(acct!.watch_thresholds).toBeNull();
    await setOrgBalance(server, u.orgKey, 1_000);
    await setAllocation(server.deps.db, {
      userId: u.userId,
      orgKey: u.orgKey,
      target: 0,
      origin: SYSTEM_ORIGIN,
    });
    expect(await crossings(u.orgKey)).toHaveLength(2);
  });

  it('hands each crossing to exactly one of several concurrent consumers, and again after a failure', async () => {
    const u = await createUser(server);
    await setOrgBalance(server, u.orgKey, 100);
    await setBalanceWatch(server.deps.db, u.orgKey, 'test.once', 50);
    await spendConcurrently(u.orgKey, u.userId, 1, 60);
    const seen: BalanceCrossing[] = [];
    let failOnce = true;
    const failing = await handleCrossings(
      server.deps.db,
      ['test.once'],
      () => {
        if (failOnce) throw new Error('handler failed');
        return Promise.resolve();
      },
      50,
      () => {
        failOnce = false;
      },
    );
    expect(failing).toBe(0);
    // The consumer that claims the crossing holds its claim until the three others have come back: on
    // PostgreSQL they meet the locked row and skip it. PGlite runs one transaction at a time, so there
    // they run after the claim's and find the crossing handled; nothing to hold for.
    let back = 0;
    const others = storageMode() === 'postgres' ? 3 : 0;
    const handled = await Promise.all(
      Array.from({ length: 4 }, () =>
        handleCrossings(server.deps.db, ['test.once'], async (_tx, c) => {
          seen.push(c);
          await eventually(() => back >= others, 5_000, 'the other consumers back without the crossing');
        }).finally(() => back++),
      ),
    );
    expect(handled.reduce((a, b) => a + b, 0)).toBe(1);
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({
      orgKey: u.orgKey,
      purpose: 'test.once',
      threshold: 50,
      balanceBefore: 100,
      balanceAfter: 40,
    });
    expect(await handleCrossings(server.deps.db, ['test.once'], () => Promise.resolve())).toBe(0);
  });
});
