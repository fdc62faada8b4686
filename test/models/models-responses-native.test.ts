import { describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';
import { weatherRoundTrip } from '../helpers/weather-round-trip.js';
import { sql } from 'drizzle-orm';
import { modelSuite, type ModelSuite } from '../helpers/model-suite.js';
import { FAKE_KEY } from '../helpers/fake-upstream.js';
import { createApiToken, createUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { queryRows } from '../../src/db/client.js';
import { countedCall } from '../helpers/counted.js';
import { loadConfig } from '../../src/config.js';

// POST /v1/responses passed through to a provider that speaks the Responses API itself
// (MODEL_UPSTREAM_API=responses). The fake provider answers POST /v1/responses over
// real HTTP (JSON and its event stream); the client is the `openai` SDK's responses.create. Money is
// proved by the ledger: prompt tokens cost 1, cached prompt tokens 0.5 and completion tokens 2 credits
// each (FakeUpstream.env and MODEL_PRICE_CACHED_INPUT below), one `usage` row per call, no hold left,
// the invariants hold.

const BODY_IDLE_MS = 1_500;
const s: ModelSuite = modelSuite({
  MODEL_UPSTREAM_API: 'responses',
  MODEL_PRICE_CACHED_INPUT: '45000',
  MODEL_UPSTREAM_BODY_IDLE_TIMEOUT_MS: String(BODY_IDLE_MS),
});
const sdk = (key = s.key) =>
  new OpenAI({ apiKey: key, baseURL: `${s.server.url}/v1`, maxRetries: 0, timeout: 15_000 });
const sent = () => s.fake.responsesRequests.at(-1)!;
const words = (text: string) => text.split(/\s+/).filter(Boolean).length;

async function lastEntryId(): Promise<number> {
  const [row] = await queryRows<{ id: unknown }>(
    s.server.deps.db,
    sql`select coalesce(max(id), 0)::bigint as id from billing_entries`,
  );
  return Number(row!.id);
}

/** The org's ledger since `sinceId`: usage debited and its rows, holds still held, the invariants. */
async function ledger(sinceId: number) {
  const [usage] = await queryRows<{ total: unknown; rows: unknown }>(
    s.server.deps.db,
    sql`select coalesce(sum(amount), 0)::bigint as total, count(*)::int as rows from billing_entries
        where org_key = ${s.owner.orgKey} and type = 'usage' and id > ${sinceId}`,
  );
  const [held] = await queryRows<{ n: unknown }>(
    s.server.deps.db,
    sql`select count(*)::int as n from billing_holds where org_key = ${s.owner.orgKey} and status = 'held'
          and user_id is not null`,
  );
  return {
    debited: Math.abs(Number(usage!.total)),
    rows: Number(usage!.rows),
    holdsLeft: Number(held!.n),
    violations: await checkInvariants(s.server.deps.db),
  };
}

/** The `usage` ledger row of a call, by its request id. */
async function ledgerDebit(requestId: string | null): Promise<number> {
  const rows = await queryRows<{ amount: unknown }>(
    s.server.deps.db,
    sql`select amount from billing_entries where key = ${`usage:${requestId}`}`,
  );
  expect(rows).toHaveLength(1);
  return Math.abs(Number(rows[0]!.amount));
}

/** Every event of a streamed call, and its text. */
async function drain(stream: AsyncIterable<OpenAI.Responses.ResponseStreamEvent>) {
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  for await (const e of stream) events.push(e);
  const text = events.map((e) => (e.type === 'response.output_text.delta' ? e.delta : '')).join('');
  return { events, types: events.map((e) => e.type), text };
}

const SVC_ID = /^resp_[0-9a-f]{32}$/;

describe('POST /v1/responses passed through to a Responses provider', () => {
  it('JSON: the request goes to the provider’s /responses as written, with svc’s changes; billed exactly, cached tokens at their price', async () => {
    const since = await lastEntryId();
    s.fake.responsesReply = () => ({ content: 'Paris is the capital', promptTokens: 12, cachedTokens: 8 });
    const { data, response } = await sdk()
      .responses.create({
        model: 'gpt-4o-mini',
        instructions: 'Be brief.',
        input: 'Capital of France?',
        metadata: { ticket: '42' },
        temperature: 0.2,
        user: 'caller-chosen',
      })
      .withResponse();
    expect(data.output_text).toBe('Paris is the capital');
    expect(data.id).toMatch(SVC_ID);
    expect(data.output[0]!.id).toBe(`msg_${data.id.slice(5)}_0`);
    expect(data).toMatchObject({ model: 'svc-test-model', store: true, metadata: { ticket: '42' } });
    expect(data.usage).toMatchObject({
      input_tokens: 12,
      input_tokens_details: { cached_tokens: 8 },
      output_tokens: 4,
    });
    // What the provider got: its own API, the model forced, the limit capped, svc's user id, nothing kept
    // at the provider, no metadata; and no chat completions call at all.
    expect(s.fake.requests).toHaveLength(0);
    const { body, headers } = sent();
    expect(headers.authorization).toBe(`Bearer ${FAKE_KEY}`);
    expect(body).toMatchObject({
      model: 'svc-test-model',
      instructions: 'Be brief.',
      input: [{ type: 'message', role: 'user', content: 'Capital of France?' }],
      temperature: 0.2,
      store: false,
      stream: false,
    });
    expect(body.max_output_tokens).toBeGreaterThan(0);
    expect(body.user).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(body.user).not.toBe('caller-chosen');
    expect(body).not.toHaveProperty('metadata');
    expect(body).not.toHaveProperty('previous_response_id');
    // (12 − 8) × 1 + 8 × 0.5 + 4 × 2 = 16.
    expect(await ledgerDebit(response.headers.get('x-svc-request-id'))).toBe(16);
    expect(response.headers.get('x-svc-outcome')).toMatch(/^ey/);
    expect(await ledger(since)).toEqual({ debited: 16, rows: 1, holdsLeft: 0, violations: [] });
    expect(await sdk().responses.retrieve(data.id)).toMatchObject({
      id: data.id,
      output_text: data.output_text,
    });
  });

  it('stream: the provider’s events relayed with svc’s ids, the last one after the settle with the usage billed', async () => {
    const since = await lastEntryId();
    s.fake.responsesReply = () => ({ content: 'one two three four five' });
    const { data: stream, response } = await sdk()
      .responses.create({ model: 'x', input: [{ role: 'user', content: 'count' }], stream: true })
      .withResponse();
    const { events, types, text } = await drain(stream);
    expect(text).toBe('one two three four five');
    expect(types.slice(0, 2)).toEqual(['response.created', 'response.in_progress']);
    expect(types.filter((t) => t === 'response.output_text.delta')).toHaveLength(5);
    expect(types.at(-1)).toBe('response.completed');
    // Sequence numbers as the provider numbered them: in order, none missing.
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const created = events[0] as OpenAI.Responses.ResponseCreatedEvent;
    const done = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
    expect(created.response.id).toMatch(SVC_ID);
    expect(done.response.id).toBe(created.response.id);
    const delta = events.find((e) => e.type === 'response.output_text.delta');
    expect(delta).toMatchObject({ item_id: `msg_${created.response.id.slice(5)}_0` });
    expect(done.response).toMatchObject({ model: 'svc-test-model', status: 'completed' });
    expect(done.response.usage).toMatchObject({ input_tokens: 10, output_tokens: 5 });
    expect(sent().body.stream).toBe(true);
    expect(await ledgerDebit(response.headers.get('x-svc-request-id'))).toBe(10 + 2 * 5);
    expect(await ledger(since)).toEqual({ debited: 20, rows: 1, holdsLeft: 0, violations: [] });
  });

  it('the outcome comes before the last event of a stream, and as the trailer', async () => {
    const res = await fetch(`${s.server.url}/v1/responses`, {
      method: 'POST',
      headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', input: 'hi', stream: true }),
    });
    const text = await res.text();
    const outcomeAt = text.indexOf(': x-svc-outcome ey');
    expect(outcomeAt).toBeGreaterThan(0);
    expect(text.indexOf('event: response.completed')).toBeGreaterThan(outcomeAt);
    expect(text.trimEnd().endsWith('}')).toBe(true);
  });

  it('a tool round trip with previous_response_id (JSON, then streamed): svc sends the whole conversation', async () => {
    s.fake.responsesReply = (body) =>
      Array.isArray(body.input) && body.input.some((i) => 'type' in i && i.type === 'function_call_output')
        ? { content: 'It is sunny in Paris' }
        : { toolCalls: [{ name: 'get_weather', arguments: '{"city":"Paris"}' }] };
    const tools: OpenAI.Responses.Tool[] = [
      {
        type: 'function',
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        strict: true,
      },
    ];
    for (const streamed of [false, true]) {
      const since = await lastEntryId();
      let first: OpenAI.Responses.Response;
      if (streamed) {
        const { events, types } = await drain(
          await sdk().responses.create({ model: 'x', input: 'Weather in Paris?', tools, stream: true }),
        );
        const args = events.map((e) => (e.type === 'response.function_call_arguments.delta' ? e.delta : ''));
        expect(args.join('')).toBe('{"city":"Paris"}');
        expect(types.at(-1)).toBe('response.completed');
        first = (events.at(-1) as OpenAI.Responses.ResponseCompletedEvent).response;
      } else first = await sdk().responses.create({ model: 'x', input: 'Weather in Paris?', tools });
      const call = first.output.find((o) => o.type === 'function_call');
      if (call?.type !== 'function_call') throw new Error('no function call');
      expect(call).toMatchObject({ name: 'get_weather', id: `fc_${first.id.slice(5)}_0` });
      expect(sent().body.tools).toEqual(tools);

      const secondArgs = {
        model: 'x',
        tools,
        previous_response_id: first.id,
        input: [{ type: 'function_call_output' as const, call_id: call.call_id, output: '22°C, sunny' }],
      };
      const second = streamed
        ? (
            (await drain(await sdk().responses.create({ ...secondArgs, stream: true }))).events.at(
              -1,
            ) as OpenAI.Responses.ResponseCompletedEvent
          ).response
        : await sdk().responses.create(secondArgs);
      const said = second.output.flatMap((o) => (o.type === 'message' ? o.content : []));
      expect(said).toEqual([{ type: 'output_text', text: 'It is sunny in Paris', annotations: [] }]);
      expect(second.previous_response_id).toBe(first.id);
      expect(sent().body).not.toHaveProperty('previous_response_id');
      expect(sent().body.input).toEqual([
        { type: 'message', role: 'user', content: 'Weather in Paris?' },
        { type: 'function_call', call_id: call.call_id, name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: call.call_id, output: '22°C, sunny' },
      ]);
      // 5 output tokens a function call, one a word; 10 input tokens each call.
      const want = 10 + 2 * 5 + (10 + 2 * words('It is sunny in Paris'));
      expect(await ledger(since)).toEqual({ debited: want, rows: 2, holdsLeft: 0, violations: [] });
    }
  });

  it('a reasoning item passes through with an id of svc’s, its tokens billed; it is not resent', async () => {
    const since = await lastEntryId();
    s.fake.responsesReply = () => ({ content: 'Ada', reasoningTokens: 7 });
    const first = await sdk().responses.create({ model: 'x', input: 'My name is Ada. Name?' });
    expect(first.output.map((o) => [o.type, o.id])).toEqual([
      ['reasoning', `rs_${first.id.slice(5)}_0`],
      ['message', `msg_${first.id.slice(5)}_1`],
    ]);
    expect(first.usage).toMatchObject({ output_tokens: 8, output_tokens_details: { reasoning_tokens: 7 } });
    await sdk().responses.create({ model: 'x', previous_response_id: first.id, input: 'Again?' });
    expect(sent().body.input).toEqual([
      { type: 'message', role: 'user', content: 'My name is Ada. Name?' },
      { type: 'message', role: 'assistant', content: 'Ada' },
      { type: 'message', role: 'user', content: 'Again?' },
    ]);
    expect(await ledger(since)).toEqual({ debited: 2 * (10 + 2 * 8), rows: 2, holdsLeft: 0, violations: [] });
  });

  it('caps max_output_tokens to what the allocation pays; the balance never goes below zero', async () => {
    await setOrgBalance(s.server, s.owner.orgKey, 200);
    const since = await lastEntryId();
    s.fake.responsesReply = () => ({ content: Array.from({ length: 500 }, (_, i) => `w${i}`).join(' ') });
    const r = await sdk().responses.create({ model: 'x', input: 'Write a lot', max_output_tokens: 100_000 });
    const cap = sent().body.max_output_tokens!;
    expect(cap).toBeGreaterThan(0);
    expect(cap).toBeLessThan(100);
    expect(r.status).toBe('incomplete');
    expect(r.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(r.max_output_tokens).toBe(100_000);
    const l = await ledger(since);
    expect(l).toEqual({ debited: 10 + 2 * cap, rows: 1, holdsLeft: 0, violations: [] });
    expect(await orgBalanceCredits(s.server.deps.db, s.owner.orgKey)).toBeGreaterThanOrEqual(0);
  });

  it('a provider breaking mid-stream: an error event and response.failed, billed once for what was delivered', async () => {
    const since = await lastEntryId();
    s.fake.responsesReply = () => ({ content: 'one two three four five six seven eight' });
    s.fake.breakAfterChunks = 3;
    s.fake.chunkDelayMs = 1; // each delta leaves before the socket is cut
    const { data: stream, response } = await sdk()
      .responses.create({ model: 'x', input: 'count', stream: true })
      .withResponse();
    const { events, types, text } = await drain(stream);
    expect(text).toBe('one two three');
    expect(types.slice(-2)).toEqual(['error', 'response.failed']);
    const failed = events.at(-1) as OpenAI.Responses.ResponseFailedEvent;
    expect(failed.response.status).toBe('failed');
    expect(failed.response.id).toBe((events[0] as OpenAI.Responses.ResponseCreatedEvent).response.id);
    // The prompt and the delivered text, counted with the tokenizer (CONTRACT §9).
    const { debit } = await countedCall({ messages: [{ role: 'user', content: 'count' }] }, text);
    expect(await ledgerDebit(response.headers.get('x-svc-request-id'))).toBe(debit);
    expect(await ledger(since)).toEqual({ debited: debit, rows: 1, holdsLeft: 0, violations: [] });
  });

  it('a provider that goes silent mid-stream: given up after the body bound, billed once for what was delivered', async () => {
    const since = await lastEntryId();
    s.fake.responsesReply = () => ({ content: 'one two three four five six' });
    s.fake.stallAfterChunks = 2;
    const started = Date.now();
    const { events, types, text } = await drain(
      await sdk().responses.create({ model: 'x', input: 'count', stream: true }),
    );
    expect(Date.now() - started).toBeLessThan(BODY_IDLE_MS + 5_000);
    expect(text).toBe('one two');
    expect(types.slice(-2)).toEqual(['error', 'response.failed']);
    expect(events.at(-2)).toMatchObject({ code: 'upstream_timeout' });
    const { debit } = await countedCall({ messages: [{ role: 'user', content: 'count' }] }, text);
    expect(await ledger(since)).toEqual({ debited: debit, rows: 1, holdsLeft: 0, violations: [] });
  });

  it('a provider reporting its own failure, or ending without its last event: failed, billed once for what was delivered', async () => {
    for (const ending of ['failed', 'cut'] as const) {
      const since = await lastEntryId();
      s.fake.responsesReply = () => ({ content: 'one two three four' });
      s.fake.responsesEnding = ending;
      const { data: stream, response } = await sdk()
        .responses.create({ model: 'x', input: 'count', stream: true })
        .withResponse();
      const { events, types, text } = await drain(stream);
      expect(text).toBe('one two three four');
      expect(types.slice(-2)).toEqual(['error', 'response.failed']);
      expect(types).not.toContain('response.completed');
      // One `error` and one response.failed: svc's own, never the provider's as well.
      expect(types.filter((t) => t === 'response.failed')).toHaveLength(1);
      expect(events.at(-2)).toMatchObject({ code: 'upstream_error' });
      // The provider's usage never came: the prompt and the delivered text, counted with the tokenizer.
      const { debit } = await countedCall({ messages: [{ role: 'user', content: 'count' }] }, text);
      expect(await ledgerDebit(response.headers.get('x-svc-request-id'))).toBe(debit);
      expect(await ledger(since)).toEqual({ debited: debit, rows: 1, holdsLeft: 0, violations: [] });
    }
  });

  it('a client that leaves mid-stream: the provider request is aborted, billed once for what streamed', async () => {
    const since = await lastEntryId();
    s.fake.responsesReply = () => ({ content: Array.from({ length: 400 }, (_, i) => `w${i}`).join(' ') });
    s.fake.chunkDelayMs = 5;
    const aborted = s.fake.abortedStreams;
    const controller = new AbortController();
    const stream = await sdk().responses.create(
      { model: 'x', input: 'count', stream: true },
      { signal: controller.signal },
    );
    let deltas = 0;
    await (async () => {
      for await (const e of stream) {
        if (e.type === 'response.output_text.delta' && ++deltas === 5) controller.abort();
      }
    })().catch(() => {});
    await expect.poll(() => s.fake.abortedStreams, { timeout: 5_000 }).toBe(aborted + 1);
    await expect.poll(async () => (await ledger(since)).rows, { timeout: 5_000 }).toBe(1);
    const l = await ledger(since);
    const all = Array.from({ length: 400 }, (_, i) => `w${i}`);
    // At least the prompt and what the client read, never the whole answer (tokenizer counts).
    expect(l.debited).toBeGreaterThanOrEqual(
      (await countedCall({ messages: [{ role: 'user', content: 'count' }] }, all.slice(0, 5).join(' ')))
        .debit,
    );
    expect(l.debited).toBeLessThan(
      (await countedCall({ messages: [{ role: 'user', content: 'count' }] }, all.join(' '))).debit,
    );
    expect(l).toMatchObject({ rows: 1, holdsLeft: 0, violations: [] });
  });

  it('a provider failing before its answer: 502 (or its 400), nothing debited, the key and address never shown', async () => {
    const since = await lastEntryId();
    for (const [status, want] of [
      [500, 502],
      [400, 400],
    ] as const) {
      s.fake.failStatus = status;
      for (const stream of [false, true]) {
        const err = await sdk()
          .responses.create({ model: 'x', input: 'hi', stream })
          .then(async (r) => (Symbol.asyncIterator in r ? (await drain(r)).types : r.status))
          .catch((e: unknown) => e);
        expect(err).toBeInstanceOf(OpenAI.APIError);
        expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(want);
        expect(JSON.stringify(err)).not.toContain(FAKE_KEY);
        expect(JSON.stringify(err)).not.toContain(s.fake.url);
      }
    }
    expect(await ledger(since)).toEqual({ debited: 0, rows: 0, holdsLeft: 0, violations: [] });
  });

  it('another organization cannot continue a response; chat completions still go to /chat/completions', async () => {
    const first = await sdk().responses.create({ model: 'x', input: 'My name is Ada.' });
    const other = await createUser(s.server);
    await setOrgBalance(s.server, other.orgKey, 10_000);
    const otherKey = (await createApiToken(s.server, other, other.orgKey)).secret;
    const calls = s.fake.responsesRequests.length;
    const cont = await sdk(otherKey)
      .responses.create({ model: 'x', previous_response_id: first.id, input: 'name?' })
      .catch((e: unknown) => e);
    expect(cont).toMatchObject({ status: 400, code: 'previous_response_not_found' });
    expect(s.fake.responsesRequests).toHaveLength(calls);
    expect(await orgBalanceCredits(s.server.deps.db, other.orgKey)).toBe(10_000);

    const chat = await sdk().chat.completions.create({
      model: 'x',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(chat.choices[0]!.message.content).toBe('Hello from the fake upstream');
    expect(s.fake.requests).toHaveLength(1);
    expect(s.fake.responsesRequests).toHaveLength(calls);
  });
});

describe('the AI SDK default provider openai(model), passed through', () => {
  const provider = () => createOpenAI({ apiKey: s.key, baseURL: `${s.server.url}/v1` });

  it('generateText and streamText, billed exactly', async () => {
    const since = await lastEntryId();
    const [chats, passed] = [s.fake.requests.length, s.fake.responsesRequests.length];
    const r = await generateText({ model: provider()('gpt-4o-mini'), prompt: 'hi', maxRetries: 0 });
    expect(r.text).toBe('Hello from the fake upstream');
    expect(r.usage).toMatchObject({ inputTokens: 10, outputTokens: 5 });
    const streamed = streamText({ model: provider()('gpt-4o-mini'), prompt: 'hi', maxRetries: 0 });
    let text = '';
    for await (const piece of streamed.textStream) text += piece;
    expect(text).toBe('Hello from the fake upstream');
    expect(await streamed.usage).toMatchObject({ inputTokens: 10, outputTokens: 5 });
    expect(s.fake.responsesRequests).toHaveLength(passed + 2);
    expect(s.fake.requests).toHaveLength(chats);
    expect(await ledger(since)).toEqual({ debited: 2 * (10 + 2 * 5), rows: 2, holdsLeft: 0, violations: [] });
  });

  it('a tool round trip across two steps: its item references resolved by svc, the provider sent the items', async () => {
    s.fake.responsesReply = (body) =>
      Array.isArray(body.input) && body.input.some((i) => 'type' in i && i.type === 'function_call_output')
        ? { content: 'It is sunny' }
        : { toolCalls: [{ name: 'weather', arguments: '{"city":"Paris"}' }] };
    const r = await weatherRoundTrip(provider()('gpt-4o-mini'));
    expect(r.text).toBe('It is sunny');
    expect(r.steps).toHaveLength(2);
    const input = sent().body.input as unknown as Record<string, unknown>[];
    expect(input.some((i) => i.type === 'item_reference')).toBe(false);
    expect(input.at(-2)).toMatchObject({
      type: 'function_call',
      name: 'weather',
      arguments: '{"city":"Paris"}',
    });
    expect(input.at(-1)).toMatchObject({ type: 'function_call_output' });
    expect(String(input.at(-1)!.output)).toContain('sunny in Paris');
  });
});

describe('MODEL_UPSTREAM_API', () => {
  it('is chat by default; responses needs an upstream (svc-local speaks only chat)', () => {
    expect(loadConfig({}).model.upstreamApi).toBe('chat');
    expect(() => loadConfig({ MODEL_UPSTREAM_API: 'responses' })).toThrow(/MODEL_UPSTREAM_API/);
    expect(() => loadConfig({ MODEL_UPSTREAM_API: 'both' })).toThrow(/MODEL_UPSTREAM_API/);
    const env = { MODEL_UPSTREAM_API: 'responses', MODEL_UPSTREAM_URL: 'http://127.0.0.1:9/v1' };
    expect(loadConfig(env).model.upstreamApi).toBe('responses');
  });
});
