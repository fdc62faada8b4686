import { beforeAll, describe, expect, it, vi } from 'vitest';
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser } from '../helpers/fixtures.js';
import { EXPIRED, orgAccountRow, setOrgBalance } from '../helpers/billing.js';
import { useTestServer } from '../helpers/billing-world.js';
import {
  creditsForCostCents,
  expireStaleHolds,
  orgBalanceCredits,
  reserveCredits,
  settleCredits,
  voidHold,
  voidHolds,
} from '../../src/billing/spend.js';
import { ownerBalance, setAllocation } from '../../src/billing/service.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { HOLD_SWEEP_INTERVAL_MS } from '../../src/billing/hooks.js';
import { AppError } from '../../src/http/errors.js';
import { queryRows } from '../../src/db/client.js';
import { anyOf } from '../helpers/json.js';

const world = useTestServer();
let server: TestServer;
beforeAll(() => {
  ({ server } = world);
});

const rid = () => `req_${randomUUID()}`;

async function expectAppError(p: Promise<unknown>, status: number, code: string) {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AppError);
  expect((err as AppError).status).toBe(status);
  expect((err as AppError).code).toBe(code);
}

describe('spend primitives (CONTRACT §8 reserve-then-settle)', () => {
  it('prices usage at round(cost_cents × 1000 / 90)', () => {
    expect(creditsForCostCents(9)).toBe(100);
    expect(creditsForCostCents(1)).toBe(11);
    expect(creditsForCostCents(0.04)).toBe(0);
    expect(creditsForCostCents(0.05)).toBe(1);
    expect(creditsForCostCents(0)).toBe(0);
  });

  it('grants the 50,000-token trial to the default client at registration', async () => {
    const u = await createUser(server);
    expect(await orgBalanceCredits(server.deps.db, u.orgKey)).toBe(50_000);
    const owner = await ownerBalance(server.deps.db, u.userId);
    expect(owner).toMatchObject({
      unallocated_credits: 0,
      lifetime_granted_credits: 50_000,
      global_credits: 50_000,
    });
    expect(owner.allocations).toEqual([
      { org_id: u.clientId, name: anyOf(String), is_default: true, allocated_credits: 50_000 },
    ]);
  });

  it('holds min(max, available), debits min(actual, held), and settles exactly once', async () => {
    const u = await createUser(server);
    const db = server.deps.db;
    await setOrgBalance(server, u.orgKey, 1_000);
    const id = rid();
    expect(
      await reserveCredits(db, {
        orgKey: u.orgKey,
        userId: u.userId,
        requestId: id,
        minCredits: 10,
        maxCredits: 5_000,
      }),
    ).toEqual({
      heldCredits: 1_000,
    });
    // Everything is held: a second call cannot reserve even one token.
    await expectAppError(
      reserveCredits(db, {
        orgKey: u.orgKey,
        userId: u.userId,
        requestId: rid(),
        minCredits: 1,
        maxCredits: 10,
      }),
      402,
      'insufficient_credits',
    );
    expect(await settleCredits(db, { requestId: id, actualCredits: 120, description: 'chat' })).toEqual({
      debitedCredits: 120,
      balanceCredits: 880,
    });
    // A repeated settle returns the first result and debits nothing more.
    expect(await settleCredits(db, { requestId: id, actualCredits: 500, description: 'chat' })).toEqual({
      debitedCredits: 120,
      balanceCredits: 880,
    });
    const rows = await queryRows<{ org_amount: number; org_balance_after: number; type: string }>(
      db,
      sql`select type, org_amount, org_balance_after from billing_entries where key = ${`usage:${id}`}`,
    );
    expect(rows.map((r) => [r.type, Number(r.org_amount), Number(r.org_balance_after)])).toEqual([
      ['usage', -120, 880],
    ]);
    expect(await checkInvariants(db)).toEqual([]);
  });

  it('caps the debit at the hold, so a balance never goes below zero', async () => {
    const u = await createUser(server);
    const db = server.deps.db;
    await setOrgBalance(server, u.orgKey, 300);
    const id = rid();
    await reserveCredits(db, {
      orgKey: u.orgKey,
      userId: u.userId,
      requestId: id,
      minCredits: 1,
      maxCredits: 300,
    });
    expect(
      (await settleCredits(db, { requestId: id, actualCredits: 10_000, description: 'x' })).debitedCredits,
    ).toBe(300);
    expect(await orgBalanceCredits(db, u.orgKey)).toBe(0);
  });

  it('returns 402 insufficient_credits when the allocation is exhausted though the pool has tokens', async () => {
    const u = await createUser(server);
    const db = server.deps.db;
    await setAllocation(db, { userId: u.userId, orgKey: u.orgKey, target: 5, origin: SYSTEM_ORIGIN });
    expect((await ownerBalance(db, u.userId)).unallocated_credits).toBe(49_995);
    await expectAppError(
      reserveCredits(db, {
        orgKey: u.orgKey,
        userId: u.userId,
        requestId: rid(),
        minCredits: 6,
        maxCredits: 100,
      }),
      402,
      'insufficient_credits',
    );
  });

  it('voids a hold without debiting, once; settle after void debits nothing', async () => {
    const u = await createUser(server);
    const db = server.deps.db;
    const id = rid();
    await reserveCredits(db, {
      orgKey: u.orgKey,
      userId: u.userId,
      requestId: id,
      minCredits: 1,
      maxCredits: 700,
    });
    expect(await voidHold(db, id)).toEqual({ releasedCredits: 700 });
    expect(await voidHold(db, id)).toEqual({ releasedCredits: 0 });
    expect(
      (await settleCredits(db, { requestId: id, actualCredits: 50, description: 'x' })).debitedCredits,
    ).toBe(0);
    expect(await orgBalanceCredits(db, u.orgKey)).toBe(50_000);
    expect(await checkInvariants(db)).toEqual([]);
  });

  it('voids several holds of several orgs in one statement: each account lowered by its own, settled ones skipped', async () => {
    const [a, b] = [await createUser(server), await createUser(server)];
    const db = server.deps.db;
    const hold = async (orgKey: string, userId: string, maxCredits: number) => {
      const requestId = rid();
      await reserveCredits(db, { orgKey, userId, requestId, minCredits: 1, maxCredits });
      return requestId;
    };
    const a1 = await hold(a.orgKey, a.userId, 300);
    const a2 = await hold(a.orgKey, a.userId, 200);
    const b1 = await hold(b.orgKey, b.userId, 700);
    const settled = await hold(b.orgKey, b.userId, 40);
    await settleCredits(db, { requestId: settled, actualCredits: 25, description: 'x' });
    expect([
      (await orgAccountRow(server, a.orgKey)).held,
      (await orgAccountRow(server, b.orgKey)).held,
    ]).toEqual([500, 700]);

    // Both sides of the statement: with and without waiting for the flush.
    expect(await voidHolds(db, [b1, a2, settled, a1], { flush: false })).toBe(1_200);
    expect(await orgAccountRow(server, a.orgKey)).toEqual({ balance: 50_000, held: 0 });
    expect(await orgAccountRow(server, b.orgKey)).toEqual({ balance: 50_000 - 25, held: 0 });
    expect(await voidHolds(db, [a1, b1])).toBe(0); // idempotent
    expect(await voidHolds(db, [])).toBe(0);
    expect(await checkInvariants(db)).toEqual([]);
  });

  it('refuses a second hold for the same request id, and a settle without a hold', async () => {
    const u = await createUser(server);
    const db = server.deps.db;
    const id = rid();
    await reserveCredits(db, {
      orgKey: u.orgKey,
      userId: u.userId,
      requestId: id,
      minCredits: 1,
      maxCredits: 10,
    });
    await expectAppError(
      reserveCredits(db, {
        orgKey: u.orgKey,
        userId: u.userId,
        requestId: id,
        minCredits: 1,
        maxCredits: 10,
      }),
      409,
      'DUPLICATE_REQUEST',
    );
    await expectAppError(
      settleCredits(db, { requestId: rid(), actualCredits: 1, description: 'x' }),
      404,
      'HOLD_NOT_FOUND',
    );
  });

  it('releases stale holds on the next reserve and in the sweep (a crashed process holds nothing forever)', async () => {
    const u = await createUser(server);
    const db = server.deps.db;
    await setOrgBalance(server, u.orgKey, 100);
    const stale = rid();
    await reserveCredits(db, {
      orgKey: u.orgKey,
      userId: u.userId,
      requestId: stale,
      minCredits: 100,
      maxCredits: 100,
      ttlSeconds: EXPIRED,
    });
    // The next reserve on that org releases the expired hold first.
    const next = rid();
    expect(
      (
        await reserveCredits(db, {
          orgKey: u.orgKey,
          userId: u.userId,
          requestId: next,
          minCredits: 100,
          maxCredits: 100,
          ttlSeconds: EXPIRED,
        })
      ).heldCredits,
    ).toBe(100);
    // The sweep releases the other one.
    expect(await expireStaleHolds(db)).toBeGreaterThanOrEqual(100);
    expect(await checkInvariants(db)).toEqual([]);
    // A settle arriving after expiry still bills what the allocation can pay, never more than held.
    expect(await settleCredits(db, { requestId: next, actualCredits: 30, description: 'late' })).toEqual({
      debitedCredits: 30,
      balanceCredits: 70,
    });
    expect(await checkInvariants(db)).toEqual([]);
  });
});

describe('the stale-hold sweep wired in createDeps', () => {
  it('runs every HOLD_SWEEP_INTERVAL_MS and stops when deps close', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    let own: TestServer | undefined;
    try {
      own = await startTestServer();
      const u = await createUser(own);
      const db = own.deps.db;
      const id = rid();
      await reserveCredits(db, {
        orgKey: u.orgKey,
        userId: u.userId,
        requestId: id,
        minCredits: 1,
        maxCredits: 500,
        ttlSeconds: 0,
      });
      const status = async () =>
        (
          await queryRows<{ status: string }>(
            db,
            sql`select status from billing_holds where request_id = ${id}`,
          )
        )[0]!.status;
      expect(await status()).toBe('held');
      vi.advanceTimersByTime(HOLD_SWEEP_INTERVAL_MS);
      await vi.waitFor(async () => expect(await status()).toBe('expired'), { timeout: 10_000, interval: 50 });
      const before = vi.getTimerCount();
      expect(before).toBeGreaterThan(0);
      await own.close();
      own = undefined;
      // deps.close() cleared the interval: no sweep fires against a closed database.
      expect(vi.getTimerCount()).toBeLessThan(before);
    } finally {
      await own?.close();
      vi.useRealTimers();
    }
  });
});
