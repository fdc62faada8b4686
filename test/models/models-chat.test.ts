import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { and, eq } from 'drizzle-orm';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { type TestServer } from '../helpers/server.js';
import { modelSuite } from '../helpers/model-suite.js';
import { type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { FAKE_KEY, type FakeUpstream } from '../helpers/fake-upstream.js';
import { billingEntries } from '../../src/db/schema.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { accountBalance, poolAccount } from '../../src/billing/ledger.js';
import { createOpenAICompatibleUpstream } from '../../src/models/upstream/openai-compatible.js';
import { client } from '../helpers/http.js';
import { parseAs, rejectionOf, type OpenAiError } from '../helpers/json.js';
import { eventually, eventuallyValue } from '../helpers/eventually.js';

// The OpenAI-compatible proxy against a fake provider over HTTP, with the official openai SDK as the
// client. Prices make the arithmetic visible: 90,000 ¢/M input and 180,000 ¢/M output, so a call debits
// exactly prompt + 2 × completion tokens (round(cost_cents × 1000 / 90)).

let server: TestServer;
let fake: FakeUpstream;
let owner: TestUser;
let key: string;

type ApiError = InstanceType<typeof OpenAI.APIError>;

const sdk = (apiKey: string, base = server.url) =>
  new OpenAI({ apiKey, baseURL: `${base}/v1`, maxRetries: 0, timeout: 10_000 });
const balance = () => orgBalanceCredits(server.deps.db, owner.orgKey);
/** The published key set, over HTTP: the outcome verifies with the same JWKS as access tokens. */
const jwks = () => createRemoteJWKSet(new URL(`${server.url}/.well-known/jwks.json`));
const usageRows = (orgKey = owner.orgKey) =>
  server.deps.db
    .select()
    .from(billingEntries)
    .where(and(eq(billingEntries.orgKey, orgKey), eq(billingEntries.type, 'usage')))
    .orderBy(billingEntries.id); // in the order written, whatever the plan

/** A streamed chat call over plain fetch, to read the server-sent events as they are on the wire. */
const rawStream = () =>
  fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${key}`,
      'content-type': 'application/json',
      'accept-encoding': 'identity',
    },
    body: JSON.stringify({ model: 'x', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });

const suite = modelSuite();
beforeAll(() => void ({ server, fake, owner, key } = suite));

describe('POST /v1/chat/completions (JSON)', () => {
  it('forces the model, debits exactly, writes one usage transaction, signs the outcome', async () => {
    const before = await balance();
    const rowsBefore = (await usageRows()).length;
    const { data, response } = await sdk(key)
      .chat.completions.create({ model: 'gpt-whatever', messages: [{ role: 'user', content: 'Say hello' }] })
      .withResponse();
    expect(data.choices[0]!.message.content).toBe('Hello from the fake upstream');
    expect(data.model).toBe('svc-test-model');
    expect(data.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 5 });
    const sent = fake.requests.at(-1)!;
    expect(sent.body.model).toBe('svc-test-model');
    expect(sent.headers.authorization).toBe(`Bearer ${FAKE_KEY}`);
    expect(sent.body.max_tokens).toBeGreaterThan(0);
    // 10 prompt + 2 × 5 completion
    expect(before - (await balance())).toBe(20);
    const rows = await usageRows();
    expect(rows.length).toBe(rowsBefore + 1);
    expect(rows.at(-1)).toMatchObject({ amount: 20, orgAmount: -20, orgBalanceAfter: before - 20 });

    const jws = response.headers.get('x-svc-outcome')!;
    const { payload, protectedHeader } = await jwtVerify(jws, jwks());
    expect(protectedHeader.alg).toBe('ES256');
    expect(payload).toMatchObject({
      sub: owner.userId,
      org: owner.orgId,
      credits_debited: 20,
      balance_credits: before - 20,
    });
    // One id names the call: the header, the outcome and the usage transaction.
    expect(payload.request_id).toMatch(/^req_/);
    expect(response.headers.get('x-svc-request-id')).toBe(payload.request_id);
    expect(rows.at(-1)!.description).toContain(`[${payload.request_id as string}]`);
  });

  it('caps max_tokens to what the allocation can pay, and the balance never goes negative', async () => {
    await setOrgBalance(server, owner.orgKey, 120);
    fake.reply = () => ({
      content: Array.from({ length: 500 }, (_, i) => `w${i}`).join(' '),
      promptTokens: 10,
    });
    const res = await sdk(key).chat.completions.create({
      model: 'x',
      messages: [{ role: 'user', content: 'Talk a lot' }],
      max_tokens: 1000,
    });
    const sent = fake.requests.at(-1)!.body;
    expect(sent.max_tokens).toBeLessThan(1000);
    expect(res.choices[0]!.finish_reason).toBe('length');
    const after = await balance();
    expect(after).toBeGreaterThanOrEqual(0);
    expect(120 - after).toBe(10 + 2 * sent.max_tokens!);
  });

  it('passes max_completion_tokens through in the same field, capped', async () => {
    await sdk(key).chat.completions.create({
      model: 'x',
      messages: [{ role: 'user', content: 'hi' }],
      max_completion_tokens: 7,
    });
    const sent = fake.requests.at(-1)!.body;
    expect(sent.max_completion_tokens).toBe(7);
    expect(sent.max_tokens).toBeUndefined();
  });

  it('returns tool calls', async () => {
    fake.reply = () => ({ toolCalls: [{ name: 'read_file', arguments: '{"path":"README.md"}' }] });
    const res = await sdk(key).chat.completions.create({
      model: 'x',
      messages: [{ role: 'user', content: 'read the readme' }],
      tools: [
        {
          type: 'function',
          function: {
            name: 'read_file',
            parameters: { type: 'object', properties: { path: { type: 'string' } } },
          },
        },
      ],
    });
    const call = res.choices[0]!.message.tool_calls![0]!;
    expect(call.type === 'function' && call.function).toMatchObject({
      name: 'read_file',
      arguments: '{"path":"README.md"}',
    });
    const sentTool = fake.requests.at(-1)!.body.tools?.[0];
    expect(sentTool?.type === 'function' && sentTool.function.name).toBe('read_file');
  });
});

describe('POST /v1/chat/completions (streaming)', () => {
  it('streams with exact SSE framing, asks upstream for usage and strips it when the client did not ask', async () => {
    const before = await balance();
    const res = await rawStream();
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await res.text();
    expect(fake.requests.at(-1)!.body.stream_options).toEqual({ include_usage: true });
    const events = text.split('\n\n').filter(Boolean);
    expect(events.at(-1)).toBe('data: [DONE]');
    const outcomeLine = events.at(-2)!;
    expect(outcomeLine).toMatch(/^: x-svc-outcome [\w-]+\.[\w-]+\.[\w-]+$/);
    const chunks = events
      .filter((e) => e.startsWith('data: {'))
      .map((e) => parseAs<OpenAI.ChatCompletionChunk>(e.slice(6)));
    expect(chunks.every((c) => c.model === 'svc-test-model')).toBe(true);
    expect(chunks.some((c) => 'usage' in c)).toBe(false);
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe(
      'Hello from the fake upstream',
    );
    expect(before - (await balance())).toBe(20);
    const { payload } = await jwtVerify(outcomeLine.split(' ')[2]!, jwks());
    expect(payload.credits_debited).toBe(20);
  });

  it('finished streams hand their provider connection back for the next call (keep-alive)', async () => {
    // The provider ends each body 30 ms after its [DONE]: the proxy, done at [DONE], must still let the
    // body finish rather than drop the connection.
    fake.endDelayMs = 30;
    const streamOnce = async () => {
      const stream = await sdk(key).chat.completions.create({
        model: 'x',
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      return text;
    };
    expect(await streamOnce()).toBe('Hello from the fake upstream');
    const opened = fake.connections;
    for (let i = 0; i < 5; i++) {
      // Each call starts once svc has read the end of the body before it: its connection is then idle again.
      await eventually(
        () => server.deps.models.upstream.connections?.().busy === 0,
        5_000,
        "the previous call's connection idle",
      );
      expect(await streamOnce()).toBe('Hello from the fake upstream');
    }
    expect(fake.connections).toBe(opened);
  });

  it('sends the outcome as an HTTP trailer too', async () => {
    const { request } = await import('node:http');
    const url = new URL(`${server.url}/v1/chat/completions`);
    const trailers = await new Promise<NodeJS.Dict<string>>((resolve, reject) => {
      const req = request(
        url,
        { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } },
        (res) => {
          expect(res.headers.trailer).toBe('x-svc-outcome');
          res.resume();
          res.on('end', () => resolve(res.trailers));
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify({ model: 'x', stream: true, messages: [{ role: 'user', content: 'hi' }] }));
    });
    const { payload } = await jwtVerify(trailers['x-svc-outcome']!, jwks());
    expect(payload).toMatchObject({ sub: owner.userId, org: owner.orgId, credits_debited: 20 });
  });

  it('forwards the usage chunk when the client asked (openai SDK)', async () => {
    const stream = await sdk(key).chat.completions.create({
      model: 'x',
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'hi' }],
    });
    let text = '';
    let usage;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe('Hello from the fake upstream');
    expect(usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
  });

  it('streams tool-call deltas', async () => {
    fake.reply = () => ({ toolCalls: [{ name: 'list_directory', arguments: '{"path":"."}' }] });
    const stream = await sdk(key).chat.completions.create({
      model: 'x',
      stream: true,
      messages: [{ role: 'user', content: 'ls' }],
      tools: [{ type: 'function', function: { name: 'list_directory', parameters: { type: 'object' } } }],
    });
    let name = '';
    let args = '';
    let finish;
    for await (const chunk of stream) {
      for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) {
        name += tc.function?.name ?? '';
        args += tc.function?.arguments ?? '';
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect({ name, args, finish }).toEqual({
      name: 'list_directory',
      args: '{"path":"."}',
      finish: 'tool_calls',
    });
  });

  it('a client that leaves mid-stream is billed for what streamed, never below zero', async () => {
    await setOrgBalance(server, owner.orgKey, 300);
    fake.chunkDelayMs = 15;
    fake.reply = () => ({ content: Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ') });
    const aborted = fake.abortedStreams;
    const stream = await sdk(key).chat.completions.create({
      model: 'x',
      stream: true,
      messages: [{ role: 'user', content: 'go on' }],
    });
    let got = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) got++;
      if (got === 5) {
        stream.controller.abort();
        break;
      }
    }
    // The settle happens when the server notices the close; wait for the usage row.
    const rows = await eventuallyValue(
      usageRows,
      (rs) => rs.some((r) => r.description?.includes('client disconnected')),
      15_000,
      "the disconnected stream's usage row",
    );
    const row = rows.find((r) => r.description?.includes('client disconnected'))!;
    expect(row).toBeDefined();
    const after = await balance();
    expect(after).toBeGreaterThanOrEqual(0);
    expect(300 - after).toBe(row.amount);
    // Prompt estimate (a few tokens) + 2 per streamed word: at least the 5 words read, far below the 200.
    expect(row.amount).toBeGreaterThanOrEqual(10);
    expect(row.amount).toBeLessThan(100);
    await eventually(() => fake.abortedStreams > aborted, 15_000, 'the provider stream aborted');
    expect(fake.abortedStreams).toBe(aborted + 1);
  });
});

describe('billing refusals and upstream failures', () => {
  it('402 insufficient_credits with x-should-retry: false while the owner still holds unallocated tokens', async () => {
    await setOrgBalance(server, owner.orgKey, 0);
    const err = await rejectionOf<ApiError>(
      sdk(key).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
    );
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect(err.status).toBe(402);
    expect(err.code).toBe('insufficient_credits');
    expect(err.headers?.get('x-should-retry')).toBe('false');
    // The owner's unallocated pool still holds tokens (the trial went back to it): still 402.
    expect((await accountBalance(server.deps.db, poolAccount(owner.userId)))!.balance).toBeGreaterThan(0);
  });

  it('upstream 500: 502 in the OpenAI shape, no debit, no provider key or address', async () => {
    fake.failStatus = 500;
    const before = await balance();
    const res = await client(server.url).post<OpenAiError>(
      '/v1/chat/completions',
      { model: 'x', messages: [{ role: 'user', content: 'hi' }] },
      { token: key },
    );
    expect(res.status).toBe(502);
    expect(res.body.error).toMatchObject({ code: 'upstream_error', type: 'server_error' });
    const raw = JSON.stringify(res.body);
    expect(raw).not.toContain(FAKE_KEY);
    expect(raw).not.toContain(fake.url.replace('/v1', ''));
    expect(await balance()).toBe(before);
  });

  it('a provider stream that breaks mid-way: an OpenAI error event, no [DONE], the delivered chunks billed', async () => {
    fake.breakAfterChunks = 2;
    fake.chunkDelayMs = 30; // the first chunks reach the client before the break
    try {
      const before = await balance();
      const res = await rawStream();
      expect(res.status).toBe(200);
      const events = (await res.text()).split('\n\n').filter(Boolean);
      expect(events.length).toBeGreaterThan(2);
      expect(events).not.toContain('data: [DONE]');
      expect(parseAs<OpenAiError>(events.at(-1)!.slice(6)).error.code).toMatch(/^upstream_/);
      // CONTRACT §8: billed for what was delivered: svc's count of the prompt (7) and 2 content chunks at 2 each.
      expect(before - (await balance())).toBe(7 + 2 * 2);
      // The SDK surfaces it as an error.
      const stream = await sdk(key).chat.completions.create({
        model: 'x',
        stream: true,
        messages: [{ role: 'user', content: 'hi' }],
      });
      const err = await rejectionOf(
        (async () => {
          for await (const _ of stream);
        })(),
      );
      expect(err).toBeInstanceOf(Error);
    } finally {
      fake.breakAfterChunks = null;
    }
  });

  it('upstream 429: passed on as 429 upstream_rate_limited, no debit', async () => {
    fake.failStatus = 429;
    const before = await balance();
    const res = await client(server.url).post<OpenAiError>(
      '/v1/chat/completions',
      { model: 'x', messages: [{ role: 'user', content: 'hi' }] },
      { token: key },
    );
    expect(res.status).toBe(429);
    expect(res.body.error.code).toBe('upstream_rate_limited');
    expect(res.headers.get('retry-after')).toBe('1');
    expect(await balance()).toBe(before);
  });

  it('upstream 400: a fixed message, never the provider text (its key or address included)', async () => {
    fake.failStatus = 400;
    const res = await client(server.url).post<OpenAiError>(
      '/v1/chat/completions',
      { model: 'x', messages: [{ role: 'user', content: 'hi' }] },
      { token: key },
    );
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('upstream_rejected');
    expect(res.body.error.message).not.toContain(FAKE_KEY);
    expect(res.body.error.message).not.toContain('127.0.0.1');
  });

  it('upstream timeout: 504, no debit', async () => {
    const original = server.deps.models.upstream;
    server.deps.models.upstream = createOpenAICompatibleUpstream({
      url: fake.url,
      key: FAKE_KEY,
      timeouts: { headersMs: 300 },
    });
    // undici's timers tick about every 500 ms: a 300 ms timeout fires within ~1 s, well before 3 s.
    fake.headersDelayMs = 3000;
    try {
      const before = await balance();
      const err = await rejectionOf<ApiError>(
        sdk(key).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
      );
      expect(err.status).toBe(504);
      expect(err.code).toBe('upstream_timeout');
      expect(await balance()).toBe(before);
    } finally {
      await server.deps.models.upstream.close();
      server.deps.models.upstream = original;
    }
  });

  it('validation: messages are required (400 in the OpenAI shape)', async () => {
    const res = await client(server.url).post<OpenAiError>(
      '/v1/chat/completions',
      { model: 'x' },
      { token: key },
    );
    expect(res.status).toBe(400);
    expect(res.body.error.type).toBe('invalid_request_error');
  });

  it('validation: the OpenAI error names the offending field in param (as the SDK exposes it)', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ messages: [] }, 'messages'],
      [{ messages: [{ role: 'wizard', content: 'hi' }] }, 'messages.0.role'],
      [{ messages: [{ role: 'user', content: 'hi' }], max_tokens: '5' }, 'max_tokens'],
      [{ messages: [{ role: 'user', content: 'hi' }], n: 99 }, 'n'],
      // Stream options without a stream, as OpenAI refuses them.
      [
        { messages: [{ role: 'user', content: 'hi' }], stream_options: { include_usage: true } },
        'stream_options',
      ],
      [
        {
          messages: [{ role: 'user', content: 'hi' }],
          stream: false,
          stream_options: { include_usage: true },
        },
        'stream_options',
      ],
    ];
    for (const [body, param] of cases) {
      const err = await rejectionOf<ApiError>(
        new OpenAI({
          apiKey: key,
          baseURL: `${server.url}/v1`,
          maxRetries: 0,
        }).chat.completions.create(body as never),
      );
      expect([err.status, err.code, err.type, err.param], JSON.stringify(body)).toEqual([
        400,
        'validation_error',
        'invalid_request_error',
        param,
      ]);
    }
    // Content is a string, an array of typed parts, or null: nothing else reaches a provider.
    for (const bad of [5, { text: 'hi' }, [1, 2], ['hi'], true]) {
      const res = await client(server.url).post<OpenAiError>(
        '/v1/chat/completions',
        { messages: [{ role: 'user', content: bad }] },
        { token: key },
      );
      expect([res.status, res.body.error.param], JSON.stringify(bad)).toEqual([400, 'messages.0.content']);
    }
    const seen = fake.requests.length;
    for (const good of ['hi', [{ type: 'text', text: 'hi' }], null]) {
      const res = await client(server.url).post(
        '/v1/chat/completions',
        { messages: [{ role: 'user', content: good }] },
        { token: key },
      );
      expect(res.status, JSON.stringify(good)).toBe(200);
    }
    expect(fake.requests.length).toBe(seen + 3);
    // A body that is not an object names no field.
    const res = await client(server.url).post<OpenAiError>('/v1/chat/completions', [1], { token: key });
    expect([res.status, res.body.error.param]).toEqual([400, null]);
  });
});
