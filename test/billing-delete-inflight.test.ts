import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { type TestServer } from './helpers/server.js';
import { modelSuite } from './helpers/model-suite.js';
import { createApiToken, type TestUser } from './helpers/fixtures.js';
import { orgAccountRow, setOrgBalance } from './helpers/billing.js';
import { type FakeUpstream } from './helpers/fake-upstream.js';
import { client } from './helpers/http.js';
import { queryRows } from '../src/db/client.js';
import { accountBalance, poolAccount } from '../src/billing/ledger.js';
import { checkInvariants } from '../src/billing/invariants.js';
import { setAllocation } from '../src/billing/service.js';
import { countPrompt } from '../src/models/tokens.js';
import type { CreatedClient } from './helpers/answers.js';

// Deleting a client with model calls in flight (CONTRACT §8 "A client is deleted only with its calls
// settled"; issue 21 item 1). Before: the deletion voided every hold, so the calls that ran on were free
// and the whole allocation went back to the pool. Now every call that produced output is debited exactly
// once, from the owner's pool where the client's tokens went (src/billing/deleted-client.ts). Real
// streams through the openai SDK against a slow fake provider over HTTP; the ledger decides: Σ usage
// debits == the real cost of every call, one row each, no hold left, the pool exact, invariants clean.

let server: TestServer;
let fake: FakeUpstream;
let owner: TestUser;

const suite = modelSuite();
beforeAll(() => void ({ server, fake, owner } = suite));

const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i}`).join(' ');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what: string, check: () => Promise<boolean> | boolean, ms = 30_000) {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

async function newClient(name: string): Promise<{ orgKey: string; clientId: string; key: string }> {
  const res = await client(server.url).post<CreatedClient>('/v1/clients', { name }, { token: owner.session });
  expect(res.status).toBe(200);
  const clientId = res.body.id;
  const orgKey = clientId.slice('client_'.length);
  return { orgKey, clientId, key: (await createApiToken(server, owner, orgKey)).secret };
}

async function usageOf(orgKey: string) {
  return queryRows<{ key: string; amount: unknown }>(
    server.deps.db,
    sql`select key, amount from billing_entries where org_key = ${orgKey} and type = 'usage' order by id`,
  );
}

const pool = async () => (await accountBalance(server.deps.db, poolAccount(owner.userId)))!;
const openHolds = async (orgKey: string) =>
  Number(
    (
      await queryRows<{ n: unknown }>(
        server.deps.db,
        sql`select count(*)::int as n from billing_holds where org_key = ${orgKey} and status = 'held'`,
      )
    )[0]!.n,
  );

interface Seen {
  delivered: number;
  usage: { prompt_tokens: number; completion_tokens: number } | null;
  error: unknown;
}

/** Reads a stream to its end (or its error), counting content chunks and keeping the usage chunk. */
function consume(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>, seen: Seen) {
  return (async () => {
    try {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content) seen.delivered++;
        if (chunk.usage) seen.usage = chunk.usage;
      }
    } catch (err) {
      seen.error = err;
    }
  })();
}

describe('deleting a client with calls in flight (issue 21 item 1)', () => {
  it('bills every call that produced output exactly once, from the owner’s pool, and returns the rest', async () => {
    const b = await newClient('Deleted mid-call');
    await setOrgBalance(server, b.orgKey, 20_000);
    const sdk = new OpenAI({ apiKey: b.key, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 60_000 });
    // 60 words, one chunk each, 40 ms apart: each stream runs ~2.4 s. The fourth call's provider reports a
    // prompt far beyond its hold (an excess, charged from the pool since its client is gone).
    fake.chunkDelayMs = 40;
    fake.reply = (body) => ({
      content: words(60),
      promptTokens: JSON.stringify(body.messages[0]!.content).includes('huge') ? 3_000 : 10,
    });
    const prompts = ['first', 'second', 'third', 'huge prompt'];
    const seen: Seen[] = prompts.map(() => ({ delivered: 0, usage: null, error: null }));
    const streams = await Promise.all(
      prompts.map((content) =>
        sdk.chat.completions.create({
          model: 'm',
          max_tokens: 100,
          stream: true,
          stream_options: { include_usage: true },
          messages: [{ role: 'user', content }],
        }),
      ),
    );
    const done = streams.map((s, i) => consume(s, seen[i]!));
    await waitFor('every stream to deliver output', () => seen.every((s) => s.delivered >= 3));
    const poolBefore = await pool();
    const heldBefore = await orgAccountRow(server, b.orgKey);
    expect(heldBefore.held).toBeGreaterThan(0);

    const del = await client(server.url).delete(`/v1/clients/${b.clientId}`, { token: owner.session });
    expect(del.status).toBe(200);
    // The client's account is empty at once; its calls' holds now sit on the pool.
    expect(await orgAccountRow(server, b.orgKey)).toEqual({ balance: 0, held: 0 });
    const poolAtDelete = await pool();
    expect(poolAtDelete.balance).toBe(poolBefore.balance + heldBefore.balance);
    expect(poolAtDelete.held - poolBefore.held).toBe(heldBefore.held);
    // New calls stop at once (the client's credentials are revoked with it).
    const refused = await sdk.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'after' }] })
      .then(
        () => null,
        (e: { status?: number }) => e.status,
      );
    expect(refused).toBeGreaterThanOrEqual(400);
    expect(refused).toBeLessThan(500);

    await Promise.all(done);
    await waitFor('every hold of the deleted client to close', async () => (await openHolds(b.orgKey)) === 0);

    // What each call cost, as the caller saw it: the provider's usage when it arrived, else the stream
    // meter's count of what was delivered (prompt counted by svc).
    const cost = seen.map((s, i) => {
      if (s.usage) return s.usage.prompt_tokens + 2 * s.usage.completion_tokens;
      expect(s.delivered).toBeGreaterThan(0);
      return countPrompt([{ role: 'user', content: prompts[i]! }], undefined) + 2 * s.delivered;
    });
    expect(seen.every((s) => s.delivered > 0)).toBe(true);
    const rows = await usageOf(b.orgKey);
    const debited = rows.reduce((s, r) => s + Number(r.amount), 0);
    const expected = cost.reduce((s, c) => s + c, 0);
    // Σ debits == the real cost of the calls that produced output; one usage row per call plus one excess.
    expect(debited).toBe(expected);
    expect(rows.filter((r) => !r.key.endsWith(':excess'))).toHaveLength(4);
    expect(rows.filter((r) => r.key.endsWith(':excess'))).toHaveLength(1);
    expect(new Set(rows.map((r) => r.key)).size).toBe(rows.length);
    // Nothing lost, nothing twice: the pool got the client's 20,000 less exactly what the calls cost.
    const after = await pool();
    expect(after.held).toBe(poolBefore.held);
    expect(after.balance).toBe(poolBefore.balance + 20_000 - expected);
    expect(await orgAccountRow(server, b.orgKey)).toEqual({ balance: 0, held: 0 });
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('a call that failed before any output is voided back to the pool; the deleted client is never charged', async () => {
    const b = await newClient('Deleted with a failing call');
    await setOrgBalance(server, b.orgKey, 5_000);
    const sdk = new OpenAI({ apiKey: b.key, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 60_000 });
    fake.headersDelayMs = 1_500;
    fake.failStatus = 500;
    const poolBefore = await pool();
    const call = sdk.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] }).then(
      () => null,
      (e: { status?: number }) => e.status,
    );
    await waitFor('the call to be held', async () => (await orgAccountRow(server, b.orgKey)).held > 0);
    expect(
      (await client(server.url).delete(`/v1/clients/${b.clientId}`, { token: owner.session })).status,
    ).toBe(200);
    expect(await call).toBe(502);
    await waitFor('the hold to close', async () => (await openHolds(b.orgKey)) === 0);
    expect(await usageOf(b.orgKey)).toEqual([]);
    const after = await pool();
    expect(after).toMatchObject({ balance: poolBefore.balance + 5_000, held: poolBefore.held });
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('an allocation that reaches a client deleted after the route looked is refused, never stranded there', async () => {
    const b = await newClient('Deleted before its allocation');
    await setOrgBalance(server, b.orgKey, 1_000);
    expect(
      (await client(server.url).delete(`/v1/clients/${b.clientId}`, { token: owner.session })).status,
    ).toBe(200);
    // PUT …/allocation checked the client live before the deletion committed; its transaction comes after.
    await expect(
      setAllocation(server.deps.db, { userId: owner.userId, orgKey: b.orgKey, target: 500 }),
    ).rejects.toMatchObject({ status: 403, code: 'NO_ACCESS' });
    expect(await orgAccountRow(server, b.orgKey)).toEqual({ balance: 0, held: 0 });
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });
});
