import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql, type SQL } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { checkFull } from '../../src/billing/reconcile-full.js';
import { readCheckpoint } from '../../src/billing/reconcile-checkpoint.js';
import { queryRows } from '../../src/db/client.js';

// The full check (src/billing/reconcile-full.ts) answers the invariants of invariants.ts in fewer
// passes: the balances through the checksum (named per account only when it differs), the holds and
// usage rows in one join, the grants by key, the refund and dispute rows in one pass. Each case below
// breaks the ledger one way and expects the full check to find exactly what the invariants' own
// queries (checkInvariants, one query per check) find, naming the same accounts and rows.

let server: TestServer;
let u: TestUser;
let key: string;

beforeAll(async () => {
  server = await startTestServer({ env: { MODEL_PRICE_INPUT: '1000000', MODEL_PRICE_OUTPUT: '1000000' } });
  u = await createUser(server);
  key = (await createApiToken(server, u, u.orgKey)).secret;
  const sdk = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 20_000 });
  for (let i = 0; i < 3; i++)
    await sdk.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: `call ${i}` }] });
});
afterAll(async () => server?.close());

const exec = (q: SQL) => server.deps.db.execute(q);
const names = (vs: { check: string }[]) => vs.map((v) => v.check);

/** Both checks' findings, which must agree; the full check's rows as text, to look for names in. */
async function bothFind(expected: string[]) {
  const full = await checkFull(server.deps.db);
  const each = await checkInvariants(server.deps.db);
  expect(names(full.violations)).toEqual(expected);
  expect(names(each)).toEqual(expected);
  return Object.fromEntries(full.violations.map((v) => [v.check, JSON.stringify(v.rows)]));
}

/** A settled hold of the user's calls, with its usage row. */
async function aSettledCall() {
  const [row] = await queryRows<{ request_id: string }>(
    server.deps.db,
    sql`select h.request_id from billing_holds h join billing_entries e on e.key = 'usage:' || h.request_id
        where h.org_key = ${u.orgKey} and h.status = 'settled' and h.debited > 0 limit 1`,
  );
  return row!.request_id;
}

const BALANCE = 'stored balance differs from the sum of its ledger rows';
const SUM = 'accounts do not sum to zero';
const HOLDS = 'settled hold differs from its usage row';
const USAGE = 'usage row without a settled hold';

describe('the full check finds what each invariant query finds', () => {
  it('a sound ledger: nothing found, and the checkpoint stored only when asked', async () => {
    await bothFind([]);
    expect(await readCheckpoint(server.deps.db)).toBeNull();
    const stored = await checkFull(server.deps.db, { store: true, windowSeconds: 0 });
    expect(stored.violations).toEqual([]);
    expect(await readCheckpoint(server.deps.db)).toEqual(stored.checkpoint);
    const [max] = await queryRows<{ m: unknown }>(
      server.deps.db,
      sql`select max(id) as m from billing_entries`,
    );
    expect(stored.checkpoint!.lastEntryId).toBe(Number(max!.m));
  });

  it('a balance changed outside the ledger: named, and the sum is off', async () => {
    const org = `org:${u.orgKey}`;
    await exec(sql`update billing_accounts set balance = balance + 1 where id = ${org}`);
    try {
      const rows = await bothFind([BALANCE, SUM]);
      expect(rows[BALANCE]).toContain(`"${org}"`);
      // Nothing stored while something is wrong.
      const before = await readCheckpoint(server.deps.db);
      expect((await checkFull(server.deps.db, { store: true, windowSeconds: 0 })).checkpoint).toBeNull();
      expect(await readCheckpoint(server.deps.db)).toEqual(before);
    } finally {
      await exec(sql`update billing_accounts set balance = balance - 1 where id = ${org}`);
    }
  });

  it('a transfer outside the ledger (still summing to zero): both accounts named', async () => {
    const org = `org:${u.orgKey}`;
    const sink = `sink:${u.orgKey}`;
    await exec(sql`update billing_accounts set balance = balance - 2 where id = ${org}`);
    await exec(sql`update billing_accounts set balance = balance + 2 where id = ${sink}`);
    try {
      const rows = await bothFind([BALANCE]);
      expect(rows[BALANCE]).toContain(`"${org}"`);
      expect(rows[BALANCE]).toContain(`"${sink}"`);
    } finally {
      await exec(sql`update billing_accounts set balance = balance + 2 where id = ${org}`);
      await exec(sql`update billing_accounts set balance = balance - 2 where id = ${sink}`);
    }
  });

  it("a settled hold whose debit differs from its usage row's", async () => {
    const requestId = await aSettledCall();
    await exec(sql`update billing_holds set debited = debited - 1 where request_id = ${requestId}`);
    try {
      expect((await bothFind([HOLDS]))[HOLDS]).toContain(requestId);
    } finally {
      await exec(sql`update billing_holds set debited = debited + 1 where request_id = ${requestId}`);
    }
  });

  it('a usage row whose hold is not settled, and one whose hold is gone', async () => {
    const voided = await aSettledCall();
    await exec(sql`update billing_holds set status = 'voided' where request_id = ${voided}`);
    try {
      const rows = await bothFind([HOLDS, USAGE]);
      expect(rows[HOLDS]).toContain(voided);
      expect(rows[USAGE]).toContain(`usage:${voided}`);
    } finally {
      await exec(sql`update billing_holds set status = 'settled' where request_id = ${voided}`);
    }
    const gone = await aSettledCall();
    const [hold] = await queryRows<Record<string, unknown>>(
      server.deps.db,
      sql`delete from billing_holds where request_id = ${gone} returning *`,
    );
    try {
      expect((await bothFind([USAGE]))[USAGE]).toContain(`usage:${gone}`);
    } finally {
      await exec(
        sql`insert into billing_holds select * from json_populate_record(null::billing_holds, ${JSON.stringify(hold)}::json)`,
      );
    }
    await bothFind([]);
  });

  it("an account's held that no active hold accounts for, and a rollup row that no longer sums its records", async () => {
    const org = `org:${u.orgKey}`;
    await exec(sql`update billing_accounts set held = held + 1 where id = ${org}`);
    await exec(sql`update usage_rollup set calls = calls + 1 where org_key = ${u.orgKey}`);
    try {
      const rows = await bothFind([
        'held differs from the sum of active holds',
        'usage rollup differs from its usage records',
      ]);
      expect(rows['held differs from the sum of active holds']).toContain(org);
    } finally {
      await exec(sql`update billing_accounts set held = held - 1 where id = ${org}`);
      await exec(sql`update usage_rollup set calls = calls - 1 where org_key = ${u.orgKey}`);
    }
  });

  it('a rollup row off by its cost alone, and one with no records and no calls', async () => {
    const ROLLUP = 'usage rollup differs from its usage records';
    await exec(sql`update usage_rollup set cost_cents = cost_cents + 0.0001 where org_key = ${u.orgKey}`);
    try {
      await bothFind([ROLLUP]);
    } finally {
      await exec(sql`update usage_rollup set cost_cents = cost_cents - 0.0001 where org_key = ${u.orgKey}`);
    }
    await exec(sql`insert into usage_rollup (org_key, hour, user_id, credential, model, calls, prompt_tokens,
                     completion_tokens, cached_prompt_tokens, credits_debited, cost_cents)
                   values (${u.orgKey}, '2020-01-01T00:00:00Z', ${u.userId}, 'token:0', 'empty', 0, 0, 0, 0, 0, 0)`);
    try {
      expect((await bothFind([ROLLUP]))[ROLLUP]).toContain('empty');
    } finally {
      await exec(sql`delete from usage_rollup where model = 'empty'`);
    }
    await bothFind([]);
  });

  // Ledger rows are immutable: what follows stays, so these come last.
  it('an excess row of a settled call is sound; a grant without its allocation, a refund row and a dispute row without their records are not', async () => {
    const org = `org:${u.orgKey}`;
    const sink = `sink:${u.orgKey}`;
    const pool = `pool:${u.userId}`;
    const requestId = await aSettledCall();
    /** A ledger row and the two balances it moves, in one transaction. */
    const row = (k: string, from: string, to: string, amount: number, type: string) =>
      server.deps.db.transaction(async (tx) => {
        await tx.execute(
          sql`insert into billing_accounts (id, kind) values (${from}, 'source'), (${to}, 'source') on conflict do nothing`,
        );
        await tx.execute(sql`insert into billing_entries (key, from_account, to_account, amount, type)
                             values (${k}, ${from}, ${to}, ${amount}, ${type})`);
        await tx.execute(sql`update billing_accounts set balance = balance - ${amount} where id = ${from}`);
        await tx.execute(sql`update billing_accounts set balance = balance + ${amount} where id = ${to}`);
      });
    await row(`usage:${requestId}:excess`, org, sink, 1, 'usage');
    await bothFind([]);
    const grant = `grant:session:cs_full_${Date.now()}`;
    await row(grant, 'src:purchases', pool, 5, 'topup');
    await row(`refund:re_full_${Date.now()}`, pool, 'src:purchases', 1, 'refund');
    await row(`dispute:dp_full_${Date.now()}`, pool, 'src:purchases', 1, 'refund');
    await row(`usage:req_full_no_hold_${Date.now()}:excess`, org, sink, 1, 'usage');
    const rows = await bothFind([
      USAGE,
      'allocation half of a grant missing or different',
      'refund row without an applied refund',
      'dispute row without its dispute',
    ]);
    expect(rows['allocation half of a grant missing or different']).toContain(grant);
    expect(rows[USAGE]).toContain('req_full_no_hold_');
    expect(rows[USAGE]).not.toContain(requestId);
  });

  it('a ledger row naming no account: the sum is off, and the checksum says the balances differ', async () => {
    const org = `org:${u.orgKey}`;
    await server.deps.db.transaction(async (tx) => {
      await tx.execute(sql`insert into billing_entries (key, from_account, to_account, amount, type)
                           values (${`test:ghost:${Date.now()}`}, ${org}, 'sink:no-such-client', 7, 'topup')`);
      await tx.execute(sql`update billing_accounts set balance = balance - 7 where id = ${org}`);
    });
    const full = names((await checkFull(server.deps.db)).violations);
    const each = names(await checkInvariants(server.deps.db));
    expect(each).toContain(SUM);
    // Everything the per-check queries find, and the balance check besides: no account row is wrong,
    // but the ledger's checksum counts the missing account's weight.
    expect(full).toEqual(expect.arrayContaining(each));
    expect(full).toContain(BALANCE);
  });
});
