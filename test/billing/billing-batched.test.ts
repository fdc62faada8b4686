import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import pg from 'pg';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createUser } from '../helpers/fixtures.js';
import { EXPIRED, orgAccountRow, setOrgBalance } from '../helpers/billing.js';
import { eventually } from '../helpers/eventually.js';
import { reserveMany, settleMany } from '../../src/billing/spend.js';
import { accountBalance, sinkAccount } from '../../src/billing/ledger.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { AppError } from '../../src/http/errors.js';
import { queryRows } from '../../src/db/client.js';

// The model path holds and settles many calls in one statement (svc_reserve_holds / svc_settle_holds,
// grouped by ModelServices.spend; docs/billing.md "Batched reserve and settle"). These tests drive the
// batchers with real concurrency (several orgs at once) and call the batch functions with mixed inputs,
// checking exact balances, one usage row per call with a consistent running balance, and the invariants.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const rid = () => `req_${randomUUID()}`;

const account = (orgKey: string) => orgAccountRow(server, orgKey);

async function usageRows(orgKey: string) {
  const rows = await queryRows<{ amount: unknown; org_balance_after: unknown; key: string }>(
    server.deps.db,
    sql`select amount, org_balance_after, key from billing_entries where org_key = ${orgKey} and type = 'usage' order by id`,
  );
  return rows.map((r) => ({ amount: Number(r.amount), after: Number(r.org_balance_after), key: r.key }));
}

const codeOf = (r: unknown) => (r instanceof AppError ? r.code : 'ok');

describe('batched reserve and settle', () => {
  it('many concurrent calls on three orgs: exact holds, exact debits, one usage row each with a running balance', async () => {
    const users = await Promise.all([createUser(server), createUser(server), createUser(server)]);
    const budgets = [1_000, 2_500, 700];
    for (const [i, u] of users.entries()) await setOrgBalance(server, u.orgKey, budgets[i]!);
    const spend = server.deps.models.spend;

    // 60 calls, 20 per org, each holding 100: org 0 can pay 10, org 1 all 20 (2,000), org 2 seven.
    const calls = users.flatMap((u) => Array.from({ length: 20 }, () => ({ u, requestId: rid() })));
    const reserved = await Promise.allSettled(
      calls.map((c) =>
        spend.reserve({
          orgKey: c.u.orgKey,
          userId: c.u.userId,
          requestId: c.requestId,
          minCredits: 100,
          maxCredits: 100,
        }),
      ),
    );
    const held = calls.filter((_, i) => reserved[i]!.status === 'fulfilled');
    const refused = reserved.filter((r) => r.status === 'rejected').map((r) => codeOf(r.reason));
    expect(refused.every((c) => c === 'insufficient_credits')).toBe(true);
    expect(users.map((u) => held.filter((c) => c.u === u).length)).toEqual([10, 20, 7]);
    expect(await account(users[0].orgKey)).toEqual({ balance: 1_000, held: 1_000 });
    expect(await account(users[1].orgKey)).toEqual({ balance: 2_500, held: 2_000 });

    // Settle each for 1..100 (some for more than held: capped at the hold).
    const actual = (i: number) => (i % 5 === 0 ? 250 : 1 + i);
    const settled = await Promise.all(
      held.map((c, i) =>
        spend.settle({ requestId: c.requestId, actualCredits: actual(i), description: `call ${i}` }),
      ),
    );
    settled.forEach((s, i) => expect(s.debitedCredits).toBe(Math.min(100, actual(i))));

    for (const [n, u] of users.entries()) {
      const mine = held.map((c, i) => ({ c, i })).filter(({ c }) => c.u === u);
      const debited = mine.reduce((sum, { i }) => sum + Math.min(100, actual(i)), 0);
      expect(await account(u.orgKey)).toEqual({ balance: budgets[n]! - debited, held: 0 });
      // One usage row per call; each row's balance-after is the previous one minus its amount.
      const rows = await usageRows(u.orgKey);
      expect(rows).toHaveLength(mine.length);
      let balance = budgets[n]!;
      for (const row of rows) {
        balance -= row.amount;
        expect(row.after).toBe(balance);
      }
      expect(new Set(rows.map((r) => r.key)).size).toBe(rows.length);
    }
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('one statement, mixed inputs: each input gets its own answer', async () => {
    const a = await createUser(server);
    await setOrgBalance(server, a.orgKey, 500);
    const first = rid();
    const second = rid();
    const results = await reserveMany(server.deps.db, [
      { orgKey: a.orgKey, userId: a.userId, requestId: first, minCredits: 1, maxCredits: 300 },
      { orgKey: a.orgKey, userId: a.userId, requestId: first, minCredits: 1, maxCredits: 300 }, // the same id again
      { orgKey: 'org_does_not_exist', userId: a.userId, requestId: rid(), minCredits: 1, maxCredits: 10 },
      { orgKey: a.orgKey, userId: a.userId, requestId: second, minCredits: 250, maxCredits: 400 }, // only 200 left
      { orgKey: a.orgKey, userId: a.userId, requestId: rid(), minCredits: 1, maxCredits: 1_000 }, // takes the rest
    ]);
    expect(results.map((r) => (r instanceof AppError ? r.code : r.heldCredits))).toEqual([
      300,
      'DUPLICATE_REQUEST',
      'insufficient_credits',
      'insufficient_credits',
      200,
    ]);
    expect(await account(a.orgKey)).toEqual({ balance: 500, held: 500 });

    const settled = await settleMany(server.deps.db, [
      { requestId: first, actualCredits: 120, description: 'first' },
      { requestId: first, actualCredits: 999, description: 'again' }, // the first result stands
      { requestId: rid(), actualCredits: 5, description: 'unknown' },
    ]);
    expect(settled.map((r) => (r instanceof AppError ? r.code : r.debitedCredits))).toEqual([
      120,
      120,
      'HOLD_NOT_FOUND',
    ]);
    expect(await account(a.orgKey)).toEqual({ balance: 380, held: 200 });
    expect((await usageRows(a.orgKey)).map((r) => r.amount)).toEqual([120]);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('a batch releases the expired holds of its orgs before it holds', async () => {
    const a = await createUser(server);
    await setOrgBalance(server, a.orgKey, 100);
    const crashed = rid();
    await reserveMany(server.deps.db, [
      {
        orgKey: a.orgKey,
        userId: a.userId,
        requestId: crashed,
        minCredits: 100,
        maxCredits: 100,
        ttlSeconds: EXPIRED,
      },
    ]);
    const [next] = await reserveMany(server.deps.db, [
      { orgKey: a.orgKey, userId: a.userId, requestId: rid(), minCredits: 100, maxCredits: 100 },
    ]);
    expect(next).toEqual({ heldCredits: 100 });
    const [row] = await queryRows<{ status: string }>(
      server.deps.db,
      sql`select status from billing_holds where request_id = ${crashed}`,
    );
    expect(row!.status).toBe('expired');
    expect(await account(a.orgKey)).toEqual({ balance: 100, held: 100 });
  });

  // A reserve releases expired holds only when they matter (the account cannot cover the batch), judged
  // on a look at the account before its lock. Another batch can take from the account in between; the
  // reserve must then still get the expired holds back. Two connections: PostgreSQL only.
  it.skipIf(storageMode() === 'pglite')(
    'an account that falls short between the look and the lock still gets its expired holds back',
    async () => {
      const a = await createUser(server);
      await setOrgBalance(server, a.orgKey, 100);
      const crashed = rid();
      await reserveMany(server.deps.db, [
        {
          orgKey: a.orgKey,
          userId: a.userId,
          requestId: crashed,
          minCredits: 50,
          maxCredits: 50,
          ttlSeconds: EXPIRED,
        },
      ]);
      // balance 100, held 50 (expired): a request of 50 looks covered.
      const other = new pg.Client({ connectionString: server.deps.config.databaseUrl });
      await other.connect();
      try {
        await other.query('begin');
        await other.query(
          `select * from svc_reserve_holds($1::text[], $2::text[], $3::text[], '{30}', '{30}', '{900}')`,
          [[rid()], [a.orgKey], [a.userId]],
        );
        // The other batch holds 30 and the account's lock, uncommitted: this reserve looks, then waits.
        const mine = reserveMany(server.deps.db, [
          { orgKey: a.orgKey, userId: a.userId, requestId: rid(), minCredits: 1, maxCredits: 50 },
        ]);
        const waiting = async () =>
          Number(
            (
              await other.query<{ count: string }>(
                `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
              )
            ).rows[0]!.count,
          );
        await eventually(async () => (await waiting()) > 0, 15_000, 'the reserve waiting for the lock');
        expect(await waiting()).toBe(1);
        await other.query('commit');
        // Locked, the account has 100 − 80 = 20: the expired 50 come back, and the request gets all it asked.
        expect(await mine).toEqual([{ heldCredits: 50 }]);
      } finally {
        await other.end();
      }
      const [row] = await queryRows<{ status: string }>(
        server.deps.db,
        sql`select status from billing_holds where request_id = ${crashed}`,
      );
      expect(row!.status).toBe('expired');
      expect(await account(a.orgKey)).toEqual({ balance: 100, held: 80 });
      expect(await checkInvariants(server.deps.db)).toEqual([]);
    },
  );

  it("a settle takes its org's next hold in the same statement, only above the floor, and still commits synchronously", async () => {
    const [a, b] = await Promise.all([createUser(server), createUser(server)]);
    await setOrgBalance(server, a.orgKey, 1_000);
    await setOrgBalance(server, b.orgKey, 1_000);
    const [callA, callB] = [rid(), rid()];
    await reserveMany(server.deps.db, [
      { orgKey: a.orgKey, userId: a.userId, requestId: callA, minCredits: 1, maxCredits: 100 },
      { orgKey: b.orgKey, userId: b.userId, requestId: callB, minCredits: 1, maxCredits: 100 },
    ]);
    const [nextA, nextB] = [rid(), rid()];
    // a: 1,000 − 40 = 960 left, at the floor of 960: held. b: 1,000 − 50 = 950, under it: not held.
    const settled = await settleMany(server.deps.db, [
      {
        requestId: callA,
        actualCredits: 40,
        description: 'a',
        next: { requestId: nextA, orgKey: a.orgKey, amount: 96, floor: 960 },
      },
      {
        requestId: callB,
        actualCredits: 50,
        description: 'b',
        next: { requestId: nextB, orgKey: b.orgKey, amount: 96, floor: 960 },
      },
      {
        requestId: rid(),
        actualCredits: 5,
        description: 'unknown',
        next: { requestId: rid(), orgKey: a.orgKey, amount: 10, floor: 0 },
      },
    ]);
    expect(settled.map((r) => (r instanceof AppError ? r.code : r))).toEqual([
      { debitedCredits: 40, balanceCredits: 960, nextHeldCredits: 96 },
      { debitedCredits: 50, balanceCredits: 950, nextHeldCredits: 0 },
      'HOLD_NOT_FOUND',
    ]);
    expect(await account(a.orgKey)).toEqual({ balance: 960, held: 96 });
    expect(await account(b.orgKey)).toEqual({ balance: 950, held: 0 });
    const holds = await queryRows<{ request_id: string; user_id: string | null; status: string }>(
      server.deps.db,
      sql`select request_id, user_id, status from billing_holds where request_id in (${nextA}, ${nextB})`,
    );
    expect(holds).toEqual([{ request_id: nextA, user_id: null, status: 'held' }]);
    expect(await checkInvariants(server.deps.db)).toEqual([]);

    // The next hold is temporary state, but it is taken inside the settle: the settle's debit must keep
    // its synchronous commit.
    const [callC, nextC] = [rid(), rid()];
    await reserveMany(server.deps.db, [
      { orgKey: a.orgKey, userId: a.userId, requestId: callC, minCredits: 1, maxCredits: 10 },
    ]);
    const [setting] = await server.deps.db.transaction(async (tx) => {
      await tx.execute(
        sql`select * from svc_settle_holds(${sql.param([callC])}::text[], '{5}', '{c}', ${sql.param([nextC])}::text[], ${sql.param([a.orgKey])}::text[], '{10}', '{0}', 900)`,
      );
      return queryRows<{ s: string }>(tx, sql`select current_setting('synchronous_commit') as s`);
    });
    const [outside] = await queryRows<{ s: string }>(
      server.deps.db,
      sql`select current_setting('synchronous_commit') as s`,
    );
    expect(setting!.s).toBe(outside!.s);
    expect(outside!.s).toBe('on');
  });

  it('one settle statement over three orgs, their calls interleaved: each account and sink written exactly, each running balance its own org', async () => {
    const users = await Promise.all([createUser(server), createUser(server), createUser(server)]);
    for (const u of users) await setOrgBalance(server, u.orgKey, 1_000);
    const sinkBalance = async (orgKey: string) =>
      (await accountBalance(server.deps.db, sinkAccount(orgKey)))!.balance;
    const sinksBefore = await Promise.all(users.map((u) => sinkBalance(u.orgKey)));
    // Inputs in the order a, b, a, c, b, c, a: request ids random, so the holds are redeemed in another
    // order than the accounts are written.
    const order = [0, 1, 0, 2, 1, 2, 0];
    const calls = order.map((n) => ({ u: users[n]!, requestId: rid() }));
    await reserveMany(
      server.deps.db,
      calls.map((c) => ({
        orgKey: c.u.orgKey,
        userId: c.u.userId,
        requestId: c.requestId,
        minCredits: 1,
        maxCredits: 100,
      })),
    );
    // Each call debits 10 × its place; c's second call spends nothing. Every call but b's asks for a next
    // hold of 50 above a floor of 500.
    const debit = (k: number) => (k === 5 ? 0 : 10 * (k + 1));
    const nexts = calls.map((c) =>
      c.u === users[1] ? undefined : { requestId: rid(), orgKey: c.u.orgKey, amount: 50, floor: 500 },
    );
    const settled = await settleMany(
      server.deps.db,
      calls.map((c, k) => ({
        requestId: c.requestId,
        actualCredits: debit(k),
        description: `call ${k}`,
        ...(nexts[k] ? { next: nexts[k] } : {}),
      })),
    );
    // Within an org, in input order: a's balances 990, 960, 890; b's 980, 930; c's 960, 960.
    expect(settled).toEqual([
      { debitedCredits: 10, balanceCredits: 990, nextHeldCredits: 50 },
      { debitedCredits: 20, balanceCredits: 980 },
      { debitedCredits: 30, balanceCredits: 960, nextHeldCredits: 50 },
      { debitedCredits: 40, balanceCredits: 960, nextHeldCredits: 50 },
      { debitedCredits: 50, balanceCredits: 930 },
      { debitedCredits: 0, balanceCredits: 960, nextHeldCredits: 50 },
      { debitedCredits: 70, balanceCredits: 890, nextHeldCredits: 50 },
    ]);
    expect(await account(users[0].orgKey)).toEqual({ balance: 890, held: 150 });
    expect(await account(users[1].orgKey)).toEqual({ balance: 930, held: 0 });
    expect(await account(users[2].orgKey)).toEqual({ balance: 960, held: 100 });
    const sinksAfter = await Promise.all(users.map((u) => sinkBalance(u.orgKey)));
    expect(sinksAfter.map((s, n) => s - sinksBefore[n]!)).toEqual([110, 70, 40]);
    expect((await usageRows(users[0].orgKey)).map((r) => [r.amount, r.after])).toEqual([
      [10, 990],
      [30, 960],
      [70, 890],
    ]);
    expect((await usageRows(users[2].orgKey)).map((r) => [r.amount, r.after])).toEqual([[40, 960]]);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('one request id reserved at once on two orgs (they meet only at the hold key): one hold, the other 409', async () => {
    const [a, b] = await Promise.all([createUser(server), createUser(server)]);
    await setOrgBalance(server, a.orgKey, 1_000);
    await setOrgBalance(server, b.orgKey, 1_000);
    for (let round = 0; round < 5; round++) {
      const id = rid();
      const results = await Promise.all(
        [a, b, a, b].map((u) =>
          reserveMany(server.deps.db, [
            { orgKey: u.orgKey, userId: u.userId, requestId: id, minCredits: 1, maxCredits: 10 },
          ]).then((r) => r[0]),
        ),
      );
      expect(results.map((r) => (r instanceof AppError ? r.code : 'held')).sort()).toEqual([
        'DUPLICATE_REQUEST',
        'DUPLICATE_REQUEST',
        'DUPLICATE_REQUEST',
        'held',
      ]);
    }
    expect((await account(a.orgKey)).held + (await account(b.orgKey)).held).toBe(50);
  });
});
