import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser } from '../helpers/fixtures.js';
import { orgAccountRow, setOrgBalance } from '../helpers/billing.js';
import { reserveCredits, settleCredits } from '../../src/billing/spend.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { AppError } from '../../src/http/errors.js';
import { queryRows } from '../../src/db/client.js';

// reserve and settle are each one autocommit statement (docs/billing.md, "One round trip each"). These
// tests race many of them on ONE org account through the server's pool (real connections on PostgreSQL),
// where a value computed from a stale row version would show: a wrong `held`, a hold that `held` does
// not count, or a CHECK violation. On PGlite they run one after another and must give the same totals.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const rid = () => `req_${randomUUID()}`;

const account = (orgKey: string) => orgAccountRow(server, orgKey);

async function activeHolds(orgKey: string) {
  const [row] = await queryRows<{ sum: unknown; n: unknown }>(
    server.deps.db,
    sql`select coalesce(sum(amount), 0)::bigint as sum, count(*)::int as n from billing_holds where org_key = ${orgKey} and status = 'held'`,
  );
  return { sum: Number(row!.sum), n: Number(row!.n) };
}

const codeOf = (r: PromiseSettledResult<unknown>) =>
  r.status === 'rejected' ? (r.reason instanceof AppError ? r.reason.code : String(r.reason)) : 'ok';

describe('one-statement reserve and settle under concurrency on one account', () => {
  it('racing reserves hold exactly what the balance pays, and held counts every hold', async () => {
    const u = await createUser(server);
    await setOrgBalance(server, u.orgKey, 1_000);
    const results = await Promise.allSettled(
      Array.from({ length: 16 }, () =>
        reserveCredits(server.deps.db, {
          orgKey: u.orgKey,
          userId: u.userId,
          requestId: rid(),
          minCredits: 100,
          maxCredits: 100,
        }),
      ),
    );
    const codes = results.map(codeOf);
    expect(codes.filter((c) => c === 'ok')).toHaveLength(10);
    expect(codes.filter((c) => c !== 'ok').every((c) => c === 'insufficient_credits')).toBe(true);
    expect(await account(u.orgKey)).toEqual({ balance: 1_000, held: 1_000 });
    expect(await activeHolds(u.orgKey)).toEqual({ sum: 1_000, n: 10 });
  });

  it('racing reserves with one request id: one hold, the others 409 DUPLICATE_REQUEST', async () => {
    const u = await createUser(server);
    await setOrgBalance(server, u.orgKey, 5_000);
    const id = rid();
    const results = await Promise.allSettled(
      Array.from({ length: 8 }, () =>
        reserveCredits(server.deps.db, {
          orgKey: u.orgKey,
          userId: u.userId,
          requestId: id,
          minCredits: 1,
          maxCredits: 300,
        }),
      ),
    );
    const codes = results.map(codeOf);
    expect(codes.filter((c) => c === 'ok')).toHaveLength(1);
    expect(codes.filter((c) => c !== 'ok').every((c) => c === 'DUPLICATE_REQUEST')).toBe(true);
    expect(await account(u.orgKey)).toEqual({ balance: 5_000, held: 300 });
    expect(await activeHolds(u.orgKey)).toEqual({ sum: 300, n: 1 });
  });

  it('reserves and settles interleaved on one account: exact balance, nothing held, invariants hold', async () => {
    const u = await createUser(server);
    await setOrgBalance(server, u.orgKey, 100_000);
    const call = async (i: number) => {
      const requestId = rid();
      await reserveCredits(server.deps.db, {
        orgKey: u.orgKey,
        userId: u.userId,
        requestId,
        minCredits: 1,
        maxCredits: 500,
      });
      return settleCredits(server.deps.db, { requestId, actualCredits: 100 + i, description: `call ${i}` });
    };
    const settled = await Promise.all(Array.from({ length: 24 }, (_, i) => call(i)));
    const debited = settled.reduce((s, r) => s + r.debitedCredits, 0);
    expect(debited).toBe(Array.from({ length: 24 }, (_, i) => 100 + i).reduce((a, b) => a + b, 0));
    expect(await account(u.orgKey)).toEqual({ balance: 100_000 - debited, held: 0 });
    const [usage] = await queryRows<{ n: unknown; sum: unknown }>(
      server.deps.db,
      sql`select count(*)::int as n, coalesce(sum(amount), 0)::bigint as sum from billing_entries where org_key = ${u.orgKey} and type = 'usage'`,
    );
    expect({ n: Number(usage!.n), sum: Number(usage!.sum) }).toEqual({ n: 24, sum: debited });
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });
});
