import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import WebSocket from 'ws';
import { sql } from 'drizzle-orm';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { modelSuite } from '../helpers/model-suite.js';
import { createApiToken, type TestUser } from '../helpers/fixtures.js';
import { orgAccountRow, setOrgBalance } from '../helpers/billing.js';
import { type FakeUpstream } from '../helpers/fake-upstream.js';
import { client } from '../helpers/http.js';
import { queryRows } from '../../src/db/client.js';
import { accountBalance, poolAccount } from '../../src/billing/ledger.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { setAllocation } from '../../src/billing/service.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import { countedCall } from '../helpers/counted.js';
import type { CreatedClient } from '../helpers/answers.js';
import { parseAs } from '../helpers/json.js';
import { eventually } from '../helpers/eventually.js';
import type { ServerFrame } from '../../src/runs/frames.js';
import { usageRecords } from '../../src/db/schema.js';
import { eq } from 'drizzle-orm';

// Deleting a client with model calls in flight (CONTRACT §8 "A client is deleted only with its calls
// settled: deleting a client stops new calls at once, ends its calls and runs in flight (billed for what
// ran), and returns its balance to the pool when they have settled"). The deletion
// ends them, in this process and in any other on the same database
// (src/billing/live-calls.ts), and each is billed for what it delivered (src/billing/deleted-client.ts).
// Real streams through the openai SDK and a real `ws` run socket against a slow fake provider over HTTP;
// the ledger decides: Σ usage debits == Σ the cost of what was delivered, one row each, no hold left,
// the pool exact, invariants clean.

let server: TestServer;
let fake: FakeUpstream;
let owner: TestUser;

const suite = modelSuite();
beforeAll(() => void ({ server, fake, owner } = suite));

const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i}`).join(' ');

const waitFor = (what: string, check: () => Promise<boolean> | boolean, ms = 30_000) =>
  eventually(check, ms, what);

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
  text: string;
  usage: { prompt_tokens: number; completion_tokens: number } | null;
  error: unknown;
}

/** The code of the OpenAI error event a stream ended with (the SDK throws it as an APIError). */
const errorCode = (s: Seen) => (s.error instanceof OpenAI.APIError ? s.error.code : String(s.error));

/** Opens one slow stream per prompt (60 words, one chunk each, 40 ms apart: ~2.4 s) and reads them. */
async function slowStreams(sdk: OpenAI, prompts: string[]) {
  fake.chunkDelayMs = 40;
  fake.reply = () => ({ content: words(60), promptTokens: 10 });
  const seen: Seen[] = prompts.map(() => ({ delivered: 0, text: '', usage: null, error: null }));
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
  const done = Promise.all(streams.map((s, i) => consume(s, seen[i]!)));
  await waitFor('every stream to deliver output', () => seen.every((s) => s.delivered >= 3));
  return { seen, done };
}

/**
 * Each ended stream: the OpenAI error event `client_deleted`, no usage chunk, part of its 60 words. Its
 * cost is its prompt and what it delivered, counted with the tokenizer (CONTRACT §9).
 */
async function endedCosts(seen: Seen[], prompts: string[]): Promise<number[]> {
  return Promise.all(
    seen.map(async (s, i) => {
      expect(errorCode(s)).toBe('client_deleted');
      expect(s.usage).toBeNull();
      expect(s.delivered).toBeGreaterThan(0);
      expect(s.delivered).toBeLessThan(60);
      return (await countedCall({ messages: [{ role: 'user', content: prompts[i]! }] }, s.text)).debit;
    }),
  );
}

/** Reads a stream to its end (or its error), counting content chunks and keeping the usage chunk. */
function consume(stream: AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>, seen: Seen) {
  return (async () => {
    try {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta.content) {
          seen.delivered++;
          seen.text += chunk.choices[0].delta.content;
        }
        if (chunk.usage) seen.usage = chunk.usage;
      }
    } catch (err) {
      seen.error = err;
    }
  })();
}

/** A real `ws` run socket, authenticated with `key`; frames queued so a test awaits them in order. */
async function runSocket(at: TestServer, key: string) {
  const ws = new WebSocket(`${at.url.replace('http', 'ws')}/v1/runs/ws`);
  const frames: ServerFrame[] = [];
  let closed: { code: number } | null = null;
  ws.on('message', (d: Buffer) => frames.push(parseAs<ServerFrame>(d.toString('utf8'))));
  ws.on('close', (code) => (closed = { code }));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  ws.send(JSON.stringify({ type: 'auth', token: key }));
  const next = async <T extends ServerFrame['type']>(type: T) => {
    let found: Extract<ServerFrame, { type: T }> | undefined;
    await waitFor(`a ${type} frame`, () => {
      const i = frames.findIndex((f) => f.type === type);
      if (i >= 0) found = frames.splice(i, 1)[0] as Extract<ServerFrame, { type: T }>;
      return found !== undefined;
    });
    return found!;
  };
  await next('authenticated');
  return {
    frames,
    next,
    send: (frame: unknown) => ws.send(JSON.stringify(frame)),
    closed: async () => {
      await waitFor('the socket to close', () => closed !== null);
      return closed;
    },
  };
}

describe('deleting a client with calls in flight', () => {
  it('ends every call in flight and bills each for what it delivered, from the owner’s pool', async () => {
    const b = await newClient('Deleted mid-call');
    await setOrgBalance(server, b.orgKey, 20_000);
    const sdk = new OpenAI({ apiKey: b.key, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 60_000 });
    const prompts = ['first', 'second', 'third', 'fourth'];
    const { seen, done } = await slowStreams(sdk, prompts);
    const poolBefore = await pool();
    const heldBefore = await orgAccountRow(server, b.orgKey);
    expect(heldBefore.held).toBeGreaterThan(0);

    const del = await client(server.url).delete(`/v1/clients/${b.clientId}`, { token: owner.session });
    expect(del.status).toBe(200);
    // The client's account is empty at once (its calls' holds sit on the pool until they settle, which
    // the ending makes prompt, so the pool is checked once they have).
    expect(await orgAccountRow(server, b.orgKey)).toEqual({ balance: 0, held: 0 });
    // New calls stop at once (the client's credentials are revoked with it).
    const refused = await sdk.chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'after' }] })
      .then(
        () => null,
        (e: { status?: number }) => e.status,
      );
    expect(refused).toBeGreaterThanOrEqual(400);
    expect(refused).toBeLessThan(500);

    // The calls in flight are ended, not run to their end: each gets the error event, none [DONE].
    await done;
    const cost = await endedCosts(seen, prompts);
    await waitFor('every hold of the deleted client to close', async () => (await openHolds(b.orgKey)) === 0);
    const rows = await usageOf(b.orgKey);
    const debited = rows.reduce((s, r) => s + Number(r.amount), 0);
    const expected = cost.reduce((s, c) => s + c, 0);
    // Σ debits == the cost of what was delivered; one usage row per call.
    expect(debited).toBe(expected);
    expect(rows).toHaveLength(4);
    expect(new Set(rows.map((r) => r.key)).size).toBe(rows.length);
    // Nothing lost, nothing twice: the pool got the client's 20,000 less exactly what the calls cost.
    const after = await pool();
    expect(after.held).toBe(poolBefore.held);
    expect(after.balance).toBe(poolBefore.balance + 20_000 - expected);
    expect(await orgAccountRow(server, b.orgKey)).toEqual({ balance: 0, held: 0 });
    expect(server.deps.billing.liveCalls.size()).toBe(0);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('a call ended before any output is billed its prompt, which the provider had, from the pool', async () => {
    const b = await newClient('Deleted with a waiting call');
    await setOrgBalance(server, b.orgKey, 5_000);
    const sdk = new OpenAI({ apiKey: b.key, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 60_000 });
    fake.headersDelayMs = 1_500;
    const poolBefore = await pool();
    const sent = fake.requests.length;
    const messages = [{ role: 'user' as const, content: 'a prompt the provider reads before it answers' }];
    const call = sdk.chat.completions.create({ model: 'm', messages }).then(
      () => null,
      (e: { status?: number }) => e.status,
    );
    await waitFor('the provider to have the call', () => fake.requests.length > sent);
    expect(
      (await client(server.url).delete(`/v1/clients/${b.clientId}`, { token: owner.session })).status,
    ).toBe(200);
    // Ended by the deletion while it waited for its provider: 403 client_deleted, nothing delivered; the
    // provider read the prompt, so the prompt is billed, counted with the tokenizer (CONTRACT §9).
    expect(await call).toBe(403);
    await waitFor('the hold to close', async () => (await openHolds(b.orgKey)) === 0);
    const { prompt } = await countedCall(fake.requests.at(-1)!.body, '');
    const rows = await usageOf(b.orgKey);
    expect(rows.map((r) => Number(r.amount))).toEqual([prompt]);
    const after = await pool();
    expect(after).toMatchObject({ balance: poolBefore.balance + 5_000 - prompt, held: poolBefore.held });
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
      setAllocation(server.deps.db, {
        userId: owner.userId,
        orgKey: b.orgKey,
        target: 500,
        origin: SYSTEM_ORIGIN,
      }),
    ).rejects.toMatchObject({ status: 403, code: 'NO_ACCESS' });
    expect(await orgAccountRow(server, b.orgKey)).toEqual({ balance: 0, held: 0 });
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });
  it('ends a run in flight: error client_deleted, close 4403, billed for what it generated', async () => {
    const b = await newClient('Deleted mid-run');
    await setOrgBalance(server, b.orgKey, 20_000);
    fake.chunkDelayMs = 40;
    fake.reply = () => ({ content: words(60), promptTokens: 10 });
    const poolBefore = await pool();
    const chunksBefore = fake.contentChunksSent;
    const run = await runSocket(server, b.key);
    run.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'go' }] });
    const started = await run.next('run_started');
    // The model call is streaming (its hold taken, the provider asked, some words generated).
    await waitFor('the run’s model call', async () => (await orgAccountRow(server, b.orgKey)).held > 0);
    await waitFor('the provider to be asked', () => fake.requests.length > 0);
    await waitFor('some words to stream', () => fake.contentChunksSent >= chunksBefore + 5);

    expect(
      (await client(server.url).delete(`/v1/clients/${b.clientId}`, { token: owner.session })).status,
    ).toBe(200);
    const ended = await run.next('error');
    expect(ended).toMatchObject({ code: 'client_deleted', run_id: started.run_id });
    expect(await run.closed()).toMatchObject({ code: 4403 });
    expect(run.frames.filter((f) => f.type === 'run_completed' || f.type === 'assistant_message')).toEqual(
      [],
    );

    await waitFor('the run’s hold to close', async () => (await openHolds(b.orgKey)) === 0);
    // Billed for what its model call generated before it was ended: the usage record's tokens at the
    // test prices (prompt + 2 × completion), part of the 60 words.
    const [record] = await server.deps.db
      .select()
      .from(usageRecords)
      .where(eq(usageRecords.orgKey, b.orgKey));
    expect(record).toBeDefined();
    expect(record!.completionTokens).toBeGreaterThan(0);
    expect(record!.completionTokens).toBeLessThan(60);
    const cost = record!.promptTokens + 2 * record!.completionTokens;
    const rows = await usageOf(b.orgKey);
    expect(rows.reduce((s, r) => s + Number(r.amount), 0)).toBe(cost);
    const after = await pool();
    expect(after.held).toBe(poolBefore.held);
    expect(after.balance).toBe(poolBefore.balance + 20_000 - cost);
    expect(server.deps.billing.liveCalls.size()).toBe(0);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  // Two svc processes on one PostgreSQL (as WEB_CONCURRENCY's workers are): the deletion is made through
  // one, the calls run on the other, which hears of it by LISTEN/NOTIFY.
  it.runIf(storageMode() === 'postgres')(
    'ends the calls another process on the same database is running',
    async () => {
      const other = await startTestServer({ databaseUrl: server.databaseUrl!, env: fake.env() });
      try {
        const b = await newClient('Deleted through the other process');
        await setOrgBalance(server, b.orgKey, 20_000);
        const sdk = new OpenAI({ apiKey: b.key, baseURL: `${other.url}/v1`, maxRetries: 0, timeout: 60_000 });
        const prompts = ['one', 'two'];
        const { seen, done } = await slowStreams(sdk, prompts);
        const poolBefore = await pool();
        expect(
          (await client(server.url).delete(`/v1/clients/${b.clientId}`, { token: owner.session })).status,
        ).toBe(200);
        await done;
        const expected = (await endedCosts(seen, prompts)).reduce((s, c) => s + c, 0);
        await waitFor('every hold to close', async () => (await openHolds(b.orgKey)) === 0);
        const rows = await usageOf(b.orgKey);
        expect(rows.reduce((s, r) => s + Number(r.amount), 0)).toBe(expected);
        expect((await pool()).balance).toBe(poolBefore.balance + 20_000 - expected);
        expect(other.deps.billing.liveCalls.size()).toBe(0);
        expect(await checkInvariants(server.deps.db)).toEqual([]);
      } finally {
        await other.close();
      }
    },
  );
});
