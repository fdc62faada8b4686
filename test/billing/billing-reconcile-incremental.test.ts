import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { reconcile } from '../../src/billing/reconcile.js';
import { checkSinceCheckpoint, readCheckpoint } from '../../src/billing/reconcile-checkpoint.js';
import { reserveCredits, voidHold } from '../../src/billing/spend.js';
import { HOLD_RETENTION_DAYS } from '../../src/billing/hold-retention.js';
import { queryRows } from '../../src/db/client.js';
import { createLogger } from '../../src/log.js';

// Reconciliation that grows with new rows (docs/scale.md): the first run checks the
// whole ledger and stores a checkpoint; later runs check what was written since, the balances against
// the stored checksum; --full still checks everything; closed holds past the retention are deleted.
// The settle window is 0 here (nothing else writes), so the checkpoint reaches the newest row.

let server: TestServer;
let u: TestUser;
let key: string;
const log = createLogger('silent');
const run = (full = false) => reconcile(server.deps.db, log, null, { full, settleWindowSeconds: 0 });
const maxEntryId = async () =>
  Number(
    (await queryRows<{ m: unknown }>(server.deps.db, sql`select max(id) as m from billing_entries`))[0]!.m,
  );

beforeAll(async () => {
  server = await startTestServer({ env: { MODEL_PRICE_INPUT: '1000000', MODEL_PRICE_OUTPUT: '1000000' } });
  u = await createUser(server);
  key = (await createApiToken(server, u, u.orgKey)).secret;
});
afterAll(async () => server?.close());

async function chat(n: number) {
  const sdk = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 20_000 });
  for (let i = 0; i < n; i++)
    await sdk.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: `call ${i}` }] });
}

describe('incremental reconciliation', () => {
  it('checks the whole ledger first, then only what was written since, moving the checkpoint', async () => {
    await chat(3);
    const first = await run();
    expect(first.violations).toEqual([]);
    expect(first.mode).toBe('full');
    expect(first.checkpoint.to).toBe(await maxEntryId());

    await chat(3);
    const second = await run();
    expect(second.violations).toEqual([]);
    expect(second.mode).toBe('incremental');
    expect(second.checkpoint).toEqual({ from: first.checkpoint.to, to: await maxEntryId() });
    expect((await readCheckpoint(server.deps.db))!.lastEntryId).toBe(second.checkpoint.to);

    const full = await run(true);
    expect(full.mode).toBe('full');
    expect(full.violations).toEqual([]);
  });

  // The balances' checksum (docs/scale.md): each case below is a wrong balance that the incremental run
  // finds through it (the accounts still sum to zero, or the case says what else is found), and that the
  // full check it falls back to names account by account.
  const BALANCE = 'stored balance differs from the sum of its ledger rows';
  const move = (id: string, by: number) =>
    server.deps.db.execute(sql`update billing_accounts set balance = balance + ${by} where id = ${id}`);
  async function expectCaught(accounts: string[], alsoFound: string[] = []) {
    const found = await checkSinceCheckpoint(server.deps.db, 0);
    expect(found!.violations.map((v) => v.check).sort()).toEqual([BALANCE, ...alsoFound].sort());
    // The checkpoint did not move over what was found.
    expect(found!.to).toEqual(found!.from);
    expect(await readCheckpoint(server.deps.db)).toEqual(found!.from);
    // The run falls back to the full check, which names each account.
    const report = await run();
    expect(report.mode).toBe('full');
    const named = report.violations.find((v) => v.check === BALANCE);
    for (const id of accounts) expect(JSON.stringify(named?.rows)).toContain(`"${id}"`);
  }

  it('finds a balance changed outside the ledger on an account no new row touched', async () => {
    const other = await createUser(server);
    await run();
    await chat(1); // new rows, on u's accounts only
    const id = `org:${other.orgKey}`;
    await move(id, 1);
    try {
      await expectCaught([id], ['accounts do not sum to zero']);
    } finally {
      await move(id, -1);
    }
    expect((await run()).violations).toEqual([]);
  });

  it('finds a balance changed outside the ledger on an account a new row touched', async () => {
    await run();
    await chat(1);
    const id = `org:${u.orgKey}`;
    await move(id, -1);
    try {
      await expectCaught([id], ['accounts do not sum to zero']);
    } finally {
      await move(id, 1);
    }
    expect((await run()).violations).toEqual([]);
  });

  it('finds a transfer outside the ledger (+x on one account, -x on another: still summing to zero)', async () => {
    const other = await createUser(server);
    await run();
    await chat(1);
    const [a, b] = [`org:${u.orgKey}`, `org:${other.orgKey}`];
    await move(a, -3);
    await move(b, 3);
    try {
      await expectCaught([a, b]);
    } finally {
      await move(a, 3);
      await move(b, -3);
    }
    expect((await run()).violations).toEqual([]);
  });

  it("finds a new ledger row whose accounts' balances were not moved", async () => {
    await run();
    const [org, pool] = [`org:${u.orgKey}`, `pool:${u.userId}`];
    // No check of the calls, grants, refunds or disputes reads a reclaim: only the balances can say.
    await server.deps.db.execute(
      sql`insert into billing_entries (key, from_account, to_account, amount, type)
          values (${`reclaim:unmoved:${Date.now()}`}, ${org}, ${pool}, 2, 'reclaim')`,
    );
    // Ledger rows are immutable: the balances move afterwards, as the row says, so the ledger is sound again.
    try {
      await expectCaught([org, pool]);
    } finally {
      await move(org, -2);
      await move(pool, 2);
    }
    expect((await run()).violations).toEqual([]);
    expect((await checkSinceCheckpoint(server.deps.db, 0))!.violations).toEqual([]);
  });

  it('rows younger than the settle window are checked but not folded into the checkpoint', async () => {
    await run();
    const before = await readCheckpoint(server.deps.db);
    await chat(2);
    // A 600 s window: the new rows are checked, the checkpoint does not move over them, twice (had their
    // sums been folded in without the checkpoint moving, the second run would count them twice).
    for (let i = 0; i < 2; i++) {
      const young = await checkSinceCheckpoint(server.deps.db, 600);
      expect(young!.violations).toEqual([]);
      expect(young!.to).toEqual(before);
      expect(await readCheckpoint(server.deps.db)).toEqual(before);
    }
    // They are checked: a balance of their account moved outside the ledger is found.
    const [org, sink] = [`org:${u.orgKey}`, `sink:${u.orgKey}`];
    await move(org, -1);
    await move(sink, 1);
    try {
      const found = await checkSinceCheckpoint(server.deps.db, 600);
      expect(found!.violations.map((v) => v.check)).toEqual([BALANCE]);
    } finally {
      await move(org, 1);
      await move(sink, -1);
    }
    // Once out of the window (0 here), the checkpoint moves over them and stays sound.
    const moved = await checkSinceCheckpoint(server.deps.db, 0);
    expect(moved!.violations).toEqual([]);
    expect(moved!.to.lastEntryId).toBe(await maxEntryId());
    expect((await checkSinceCheckpoint(server.deps.db, 0))!.violations).toEqual([]);
  });

  it('one pass over the accounts finds what the four account checks of the full run find, named alike', async () => {
    await run();
    const org = `org:${u.orgKey}`;
    const debt = `debt:${u.userId}-tampered`;
    // A held that no active hold accounts for, and a debt account above zero (which also breaks the sum,
    // and differs from its ledger rows: none).
    await server.deps.db.execute(sql`update billing_accounts set held = held + 1 where id = ${org}`);
    await server.deps.db.execute(
      sql`insert into billing_accounts (id, kind, user_id, balance) values (${debt}, 'debt', ${u.userId}, 7)`,
    );
    try {
      const found = await checkSinceCheckpoint(server.deps.db, 0);
      expect(found!.violations.map((v) => v.check).sort()).toEqual([
        'accounts do not sum to zero',
        'debt account above zero',
        'held differs from the sum of active holds',
        'stored balance differs from the sum of its ledger rows',
      ]);
      const rows = Object.fromEntries(found!.violations.map((v) => [v.check, JSON.stringify(v.rows)]));
      expect(rows['held differs from the sum of active holds']).toContain(org);
      expect(rows['debt account above zero']).toContain(debt);
      expect(rows['accounts do not sum to zero']).toContain('7');
      // The full check (the run falls back to it) names the same accounts under the same checks.
      const report = await run();
      expect(report.mode).toBe('full');
      expect(report.violations.map((v) => v.check)).toEqual(
        expect.arrayContaining(found!.violations.map((v) => v.check)),
      );
    } finally {
      await server.deps.db.execute(sql`delete from billing_accounts where id = ${debt}`);
      await server.deps.db.execute(sql`update billing_accounts set held = held - 1 where id = ${org}`);
    }
    expect((await run()).violations).toEqual([]);
  });

  it(`deletes holds closed more than ${HOLD_RETENTION_DAYS} days ago, keeps the rest`, async () => {
    const old = `req_retention_old_${Date.now()}`;
    const recent = `req_retention_recent_${Date.now()}`;
    for (const requestId of [old, recent]) {
      await reserveCredits(server.deps.db, {
        orgKey: u.orgKey,
        userId: u.userId,
        requestId,
        minCredits: 1,
        maxCredits: 5,
      });
      await voidHold(server.deps.db, requestId);
    }
    await server.deps.db.execute(
      sql`update billing_holds set closed_at = now() - make_interval(days => ${HOLD_RETENTION_DAYS + 1})
          where request_id = ${old}`,
    );
    const report = await run();
    expect(report.violations).toEqual([]);
    expect(report.prunedHolds).toBe(1);
    const left = await queryRows<{ request_id: string }>(
      server.deps.db,
      sql`select request_id from billing_holds where request_id in (${old}, ${recent})`,
    );
    expect(left.map((r) => r.request_id)).toEqual([recent]);
  });

  it('finds a usage row written since the checkpoint that has no settled hold', async () => {
    await run();
    // Last in this file: ledger rows are immutable, so this one stays. Balances moved with it, so only
    // the missing hold is wrong.
    await server.deps.db.transaction(async (tx) => {
      await tx.execute(
        sql`insert into billing_entries (key, from_account, to_account, amount, type, org_key, org_amount)
            values ('usage:req_no_hold', ${`org:${u.orgKey}`}, ${`sink:${u.orgKey}`}, 1, 'usage', ${u.orgKey}, -1)`,
      );
      await tx.execute(
        sql`update billing_accounts set balance = balance - 1 where id = ${`org:${u.orgKey}`}`,
      );
      await tx.execute(
        sql`update billing_accounts set balance = balance + 1 where id = ${`sink:${u.orgKey}`}`,
      );
    });
    const found = await checkSinceCheckpoint(server.deps.db, 0);
    expect(found!.violations.map((v) => v.check)).toEqual([
      'usage row without a settled hold of the same debit',
    ]);
    const report = await run();
    expect(report.violations.map((v) => v.check)).toEqual(['usage row without a settled hold']);
  });
});
