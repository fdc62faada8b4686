import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser } from '../helpers/fixtures.js';
import { orgAccountRow, setOrgBalance } from '../helpers/billing.js';
import { reserveCredits, settleCredits } from '../../src/billing/spend.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { queryRows } from '../../src/db/client.js';

// The ledger and the holds name their accounts without a foreign key (decisions 0138, 0139): the settle
// refuses to write a `usage` row whose sink is missing, a hold is taken only on an account that exists,
// and reconciliation shows a row that moved money to no account.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const countOf = async (query: ReturnType<typeof sql>) =>
  Number((await queryRows<{ n: unknown }>(server.deps.db, query))[0]!.n);

describe('ledger rows name existing accounts', () => {
  it('a settle whose usage sink is missing fails whole: the hold stays live, nothing is debited or recorded', async () => {
    const u = await createUser(server);
    await setOrgBalance(server, u.orgKey, 1_000);
    const requestId = `req_${randomUUID()}`;
    await reserveCredits(server.deps.db, {
      orgKey: u.orgKey,
      userId: u.userId,
      requestId,
      minCredits: 100,
      maxCredits: 100,
    });
    await server.deps.db.execute(sql`delete from billing_accounts where id = ${`sink:${u.orgKey}`}`);

    const failure: unknown = await settleCredits(server.deps.db, {
      requestId,
      actualCredits: 40,
      description: 'chat',
      usage: {
        org: u.orgKey,
        user: u.userId,
        api_token_id: null,
        oauth_grant_id: null,
        oauth_client_id: null,
        source: 'chat',
        run_id: null,
        model: 'm',
        prompt_tokens: 10,
        completion_tokens: 20,
        price_input: 100,
        price_output: 200,
        duration_ms: 5,
        outcome: 'completed',
      },
    }).then(
      () => null,
      (err: unknown) => err,
    );
    // PostgreSQL's error itself, or (PGlite) the driver's error carried as the query error's cause.
    const cause = ((failure as { cause?: unknown } | null)?.cause ?? failure) as {
      code?: string;
      message?: string;
    };
    expect(cause.code).toBe('23503');
    expect(cause.message).toMatch(/no ledger account sink:/);

    expect(await orgAccountRow(server, u.orgKey)).toEqual({ balance: 1_000, held: 100 });
    expect(
      await countOf(
        sql`select count(*) as n from billing_holds where request_id = ${requestId} and status = 'held'`,
      ),
    ).toBe(1);
    expect(
      await countOf(sql`select count(*) as n from billing_entries where key = ${`usage:${requestId}`}`),
    ).toBe(0);
    expect(await countOf(sql`select count(*) as n from usage_records where request_id = ${requestId}`)).toBe(
      0,
    );
  });

  it('a hold for a client with no ledger account is refused and writes no hold row', async () => {
    const requestId = `req_${randomUUID()}`;
    await expect(
      reserveCredits(server.deps.db, {
        orgKey: `no-such-client-${randomUUID()}`,
        userId: 'usr_nobody',
        requestId,
        minCredits: 1,
        maxCredits: 10,
      }),
    ).rejects.toMatchObject({ code: 'insufficient_credits' });
    expect(await countOf(sql`select count(*) as n from billing_holds where request_id = ${requestId}`)).toBe(
      0,
    );
  });

  it('reconciliation shows money moved to an account that does not exist', async () => {
    const u = await createUser(server);
    await setOrgBalance(server, u.orgKey, 500);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
    const org = `org:${u.orgKey}`;
    await server.deps.db.transaction(async (tx) => {
      await tx.execute(sql`insert into billing_entries (key, from_account, to_account, amount, type)
                           values (${`test:ghost:${randomUUID()}`}, ${org}, 'sink:no-such-client', 7, 'usage')`);
      await tx.execute(sql`update billing_accounts set balance = balance - 7 where id = ${org}`);
    });
    const names = (await checkInvariants(server.deps.db)).map((v) => v.check);
    expect(names).toContain('accounts do not sum to zero');
  });
});
