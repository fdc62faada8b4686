import { beforeEach, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { accountBalance, debtAccount } from '../../src/billing/ledger.js';
import { modelSuite, type ModelSuite } from '../helpers/model-suite.js';
import { setOrgBalance } from '../helpers/billing.js';
import { lastEntryId, orgLedger, waitUntil } from '../helpers/chat-load.js';
import { authenticateRunSocket } from '../helpers/run-socket.js';
import { countedCall } from '../helpers/counted.js';
import { addMember, createApiToken, createUser } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';

// Every call the provider received is billed exactly once, at what it cost (CONTRACT §8–§9), whatever the
// request's shape and whatever its caller does. The fake provider counts like a real one here
// (promptFromFields: every field it reads as prompt, about 4 bytes a token) and keeps every request it
// received; the ledger is the witness: Σ debits = what the provider counted, no owner debt, no hold left.

const s: ModelSuite = modelSuite({ ORG_MAX_CONCURRENCY: '8' });
const sdk = (key = s.key) =>
  new OpenAI({ apiKey: key, baseURL: `${s.server.url}/v1`, maxRetries: 0, timeout: 30_000 });

/** A JSON Schema of about `bytes` bytes (a long description), the shape tools and formats carry. */
const schemaOf = (bytes: number) => ({
  type: 'object',
  description: 'x'.repeat(bytes),
  properties: { city: { type: 'string' } },
});

/** Σ of the org's usage debits and its debt rows after ledger entry `since`; the owner's debt. */
async function ledgerSince(since: number) {
  const [row] = await queryRows<{ debited: unknown; rows: unknown }>(
    s.server.deps.db,
    sql`select coalesce(sum(amount), 0) as debited, count(*) as rows from billing_entries
        where type = 'usage' and org_key = ${s.owner.orgKey} and id > ${since}`,
  );
  const debt = (await accountBalance(s.server.deps.db, debtAccount(s.owner.userId)))?.balance ?? 0;
  const { openHolds } = await orgLedger(s.server, s.owner.orgKey);
  return { debited: Math.abs(Number(row!.debited)), rows: Number(row!.rows), debt, openHolds };
}

describe('the reserve counts every field the provider reads as prompt (CONTRACT §9)', () => {
  // 100 KB in one field: about 25,000 tokens at the provider, far beyond a 2,000-token allocation.
  const big = 100_000;
  const shapes: [string, () => Promise<unknown>][] = [
    [
      'chat functions',
      () =>
        sdk().chat.completions.create({
          model: 'x',
          max_tokens: 1,
          messages: [{ role: 'user', content: 'hi' }],
          functions: [{ name: 'f', parameters: schemaOf(big) }],
        }),
    ],
    [
      'chat function_call',
      () =>
        sdk().chat.completions.create({
          model: 'x',
          max_tokens: 1,
          messages: [{ role: 'user', content: 'hi' }],
          function_call: { name: 'f'.repeat(big) },
        }),
    ],
    [
      'chat response_format json_schema',
      () =>
        sdk().chat.completions.create({
          model: 'x',
          max_tokens: 1,
          messages: [{ role: 'user', content: 'hi' }],
          response_format: { type: 'json_schema', json_schema: { name: 'r', schema: schemaOf(big) } },
        }),
    ],
    [
      'responses text.format',
      () =>
        sdk().responses.create({
          model: 'x',
          max_output_tokens: 16,
          input: 'hi',
          text: { format: { type: 'json_schema', name: 'r', schema: schemaOf(big) } },
        }),
    ],
    [
      'responses instructions',
      () =>
        sdk().responses.create({
          model: 'x',
          max_output_tokens: 16,
          input: 'hi',
          instructions: 'y'.repeat(big),
        }),
    ],
    [
      'messages system',
      () =>
        new Anthropic({ apiKey: s.key, baseURL: s.server.url, maxRetries: 0 }).messages.create({
          model: 'x',
          max_tokens: 1,
          system: 'z'.repeat(big),
          messages: [{ role: 'user', content: 'hi' }],
        }),
    ],
  ];

  for (const [name, call] of shapes) {
    it(`${name}: 402 before the provider is asked when the allocation cannot pay it; no debt`, async () => {
      s.fake.promptFromFields = true;
      await setOrgBalance(s.server, s.owner.orgKey, 2_000);
      const since = await lastEntryId(s.server);
      const received = s.fake.received.length;
      const err = await call().catch((e: unknown) => e);
      expect(err).toMatchObject({ status: 402 });
      expect(s.fake.received.length).toBe(received);
      expect(await ledgerSince(since)).toEqual({ debited: 0, rows: 0, debt: 0, openHolds: 0 });
    });
  }

  it('each shape, once the allocation can pay: debited exactly what the provider counted, never beyond its hold', async () => {
    s.fake.promptFromFields = true;
    s.fake.reply = () => ({ content: 'ok' });
    await setOrgBalance(s.server, s.owner.orgKey, 1_000_000);
    const since = await lastEntryId(s.server);
    const received = s.fake.received.length;
    for (const [, call] of shapes) await call();
    const counted = s.fake.received.slice(received);
    expect(counted).toHaveLength(shapes.length);
    // Each answer is 'ok' (1 completion token at 2 credits) on top of the prompt the provider counted.
    const want = counted.reduce((sum, r) => sum + r.promptTokens + 2, 0);
    const l = await ledgerSince(since);
    expect(l).toEqual({ debited: want, rows: shapes.length, debt: 0, openHolds: 0 });
    // Nothing was charged beyond a hold: no `…:excess` entry.
    const [excess] = await queryRows<{ n: unknown }>(
      s.server.deps.db,
      sql`select count(*) as n from billing_entries where key like 'usage:%:excess' and id > ${since}`,
    );
    expect(Number(excess!.n)).toBe(0);
    expect(await checkInvariants(s.server.deps.db)).toEqual([]);
  });
});

// Room for the large prompts' holds below (a hold is the prompt's bound: its bytes).
const roomy = () => setOrgBalance(s.server, s.owner.orgKey, 500_000);

describe('a call whose usage never arrives is counted with the tokenizer (CONTRACT §9)', () => {
  beforeEach(roomy);
  // Base64 is "one word" to a word count, and about 1,500 tokens a KB... to o200k_base far more than 1.
  const base64 = Buffer.from(Array.from({ length: 30_000 }, (_, i) => (i * 2654435761) & 255)).toString(
    'base64',
  );

  it('a stream dropped after two chunks: billed its prompt and the two chunks, as the tokenizer counts them', async () => {
    s.fake.reply = () => ({ content: Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ') });
    s.fake.chunkDelayMs = 20;
    const since = await lastEntryId(s.server);
    const controller = new AbortController();
    const stream = await sdk().chat.completions.create(
      { model: 'x', stream: true, messages: [{ role: 'user', content: base64 }] },
      { signal: controller.signal },
    );
    let text = '';
    let chunks = 0;
    await (async () => {
      for await (const c of stream) {
        const piece = c.choices[0]?.delta.content;
        if (!piece) continue;
        text += piece;
        if (++chunks === 2) controller.abort();
      }
    })().catch(() => {});
    await waitUntil(async () => (await ledgerSince(since)).rows === 1, 10_000);
    const l = await ledgerSince(since);
    const body = s.fake.requests.at(-1)!.body;
    const { prompt } = await countedCall(body, '');
    // The prompt alone is thousands of tokens (a word count saw 9).
    expect(prompt).toBeGreaterThan(10_000);
    // What streamed before the provider was stopped: at least the two chunks the client read.
    expect(l.debited).toBeGreaterThanOrEqual((await countedCall(body, text)).debit);
    expect(l.debited).toBeLessThan((await countedCall(body, text)).debit + 2 * 200);
    expect(l).toMatchObject({ rows: 1, debt: 0, openHolds: 0 });
  });

  it('a stream whose caller leaves before its first chunk: billed its prompt', async () => {
    const release = s.fake.holdAnswers();
    const since = await lastEntryId(s.server);
    const received = s.fake.received.length;
    const controller = new AbortController();
    const pending = sdk()
      .chat.completions.create(
        { model: 'x', stream: true, messages: [{ role: 'user', content: base64 }] },
        { signal: controller.signal },
      )
      .catch(() => null);
    await waitUntil(() => s.fake.received.length > received, 10_000);
    controller.abort();
    await pending;
    await waitUntil(async () => (await ledgerSince(since)).rows === 1, 10_000);
    release();
    const { prompt } = await countedCall(s.fake.requests.at(-1)!.body, '');
    expect(await ledgerSince(since)).toEqual({ debited: prompt, rows: 1, debt: 0, openHolds: 0 });
  });

  it('a run whose socket drops while its model call is at the provider: billed the task’s prompt', async () => {
    const release = s.fake.holdAnswers();
    const since = await lastEntryId(s.server);
    const received = s.fake.received.length;
    const run = await authenticateRunSocket(s.server.url, s.key);
    run.ws.send(
      JSON.stringify({ type: 'start', agent: 'default', messages: [{ role: 'user', content: base64 }] }),
    );
    await waitUntil(() => s.fake.received.length > received, 10_000);
    run.ws.terminate();
    await waitUntil(async () => (await ledgerSince(since)).rows === 1, 10_000);
    release();
    const { prompt } = await countedCall(s.fake.requests.at(-1)!.body, '');
    expect(prompt).toBeGreaterThan(10_000);
    expect(await ledgerSince(since)).toEqual({ debited: prompt, rows: 1, debt: 0, openHolds: 0 });
  });

  it('a run cancelled while its model call is at the provider: billed the task’s prompt', async () => {
    const release = s.fake.holdAnswers();
    const since = await lastEntryId(s.server);
    const received = s.fake.received.length;
    const run = await authenticateRunSocket(s.server.url, s.key);
    run.ws.send(
      JSON.stringify({ type: 'start', agent: 'default', messages: [{ role: 'user', content: base64 }] }),
    );
    await waitUntil(() => s.fake.received.length > received, 10_000);
    run.ws.send(JSON.stringify({ type: 'cancel' }));
    await waitUntil(async () => (await ledgerSince(since)).rows === 1, 10_000);
    release();
    const { prompt } = await countedCall(s.fake.requests.at(-1)!.body, '');
    expect(await ledgerSince(since)).toEqual({ debited: prompt, rows: 1, debt: 0, openHolds: 0 });
    run.ws.terminate();
  });
});

describe('a JSON call whose caller hangs up is completed and settled (CONTRACT §9)', () => {
  beforeEach(roomy);
  it('three callers leave before their answers: each is settled at the provider’s usage, its slot held until then', async () => {
    s.fake.promptFromFields = true;
    s.fake.reply = () => ({ content: 'one two three four five' });
    // An earlier call's slot may still be parked for this process's next call (slot reuse): counted below.
    await waitUntil(async () => (await orgLedger(s.server, s.owner.orgKey)).liveLeases === 0, 10_000);
    const release = s.fake.holdAnswers();
    const since = await lastEntryId(s.server);
    const received = s.fake.received.length;
    const controller = new AbortController();
    const calls = Array.from({ length: 3 }, (_, i) =>
      sdk()
        .chat.completions.create(
          { model: 'x', messages: [{ role: 'user', content: `question ${i} `.repeat(2_000) }] },
          { signal: controller.signal },
        )
        .catch(() => null),
    );
    await waitUntil(() => s.fake.received.length === received + 3, 10_000);
    controller.abort();
    await Promise.all(calls);
    // The callers are gone; the provider is still working: their slots stay held, nothing settled yet.
    expect(await orgLedger(s.server, s.owner.orgKey)).toMatchObject({ liveLeases: 3, openHolds: 3 });
    release();
    await waitUntil(async () => (await ledgerSince(since)).rows === 3, 10_000);
    const want = s.fake.received.slice(received).reduce((sum, r) => sum + r.promptTokens + 2 * 5, 0);
    expect(await ledgerSince(since)).toEqual({ debited: want, rows: 3, debt: 0, openHolds: 0 });
    await waitUntil(async () => (await orgLedger(s.server, s.owner.orgKey)).liveLeases === 0, 10_000);
    expect(await checkInvariants(s.server.deps.db)).toEqual([]);
  });

  it('a provider failure that produced nothing still debits nothing', async () => {
    s.fake.failStatus = 500;
    const since = await lastEntryId(s.server);
    const err = await sdk()
      .chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 502 });
    expect(await ledgerSince(since)).toEqual({ debited: 0, rows: 0, debt: 0, openHolds: 0 });
  });
});

describe('excess beyond a hold counts against budgets (CONTRACT §9)', () => {
  it('a member budget and a token budget are charged the excess: the page shows what the ledger took', async () => {
    await setOrgBalance(s.server, s.owner.orgKey, 100_000);
    const member = await createUser(s.server);
    await addMember(s.server, s.owner.orgKey, member.userId);
    const token = await createApiToken(s.server, member, s.owner.orgKey);
    const api = client(s.server.url);
    const put = (path: string) =>
      api.put(path, { period: 'day', budget_credits: 150 }, { token: s.owner.session });
    expect((await put(`/v1/clients/${s.owner.clientId}/members/${member.userId}/budget`)).status).toBe(200);
    expect((await put(`/v1/clients/${s.owner.clientId}/tokens/${token.id}/budget`)).status).toBe(200);
    // A provider reporting far more than the hold covered (a provider's own mistake).
    s.fake.reply = () => ({ content: 'ok', promptTokens: 1_000 });
    const since = await lastEntryId(s.server);
    await sdk(token.secret).chat.completions.create({
      model: 'x',
      max_tokens: 1,
      messages: [{ role: 'user', content: 'hi' }],
    });
    const l = await ledgerSince(since);
    expect(l.debited).toBe(1_000 + 2);
    const mine = await api.get<{
      budget: { spent_credits: number };
      token_budgets: { spent_credits: number }[];
    }>(`/v1/clients/${s.owner.clientId}/budget`, { token: member.session });
    expect(mine.body.budget.spent_credits).toBe(l.debited);
    expect(mine.body.token_budgets[0]!.spent_credits).toBe(l.debited);
    // The budget is spent: the next call is refused before the provider is asked.
    const received = s.fake.received.length;
    const next = await sdk(token.secret)
      .chat.completions.create({ model: 'x', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(next).toMatchObject({ status: 402, code: 'member_budget_exhausted' });
    expect(s.fake.received.length).toBe(received);
  });
});
