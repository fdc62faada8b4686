import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { accountBalance, debtAccount } from '../../src/billing/ledger.js';
import { storageMode } from '../helpers/server.js';
import { modelSuite, type ModelSuite } from '../helpers/model-suite.js';
import { setOrgBalance } from '../helpers/billing.js';
import { orgLedger, waitUntil } from '../helpers/chat-load.js';
import { countedCall } from '../helpers/counted.js';
import { fieldPromptTokens } from '../helpers/fake-upstream.js';

// The concurrent property of the model path (CONTRACT §8–§9), next to the ledger's (billing-property.test.ts):
// random calls of random request shapes (a large field among messages, tools, functions, function_call,
// response_format; chat or /v1/responses) made by callers that behave at random (stay to the end, hang up
// a JSON call, drop a stream after some chunks, leave a stream before its first chunk), several at once,
// against a provider that counts prompt from every field (about 4 bytes a token). After every run:
//  - every request the provider received is billed exactly once (one `usage` row each, never two);
//  - a call that completed is debited what the provider counted; a call cut short at least its prompt
//    and what its caller read, counted with the tokenizer, and never more than prompt + its output cap;
//  - no hold is left, no owner debt arose from a request shape, and billing:reconcile's invariants hold.
// PGlite runs the calls of a run one after another (one connection); PostgreSQL runs them at once.

const concurrent = storageMode() === 'postgres';
const RUNS = Number(process.env.BILLING_PROPERTY_RUNS ?? (concurrent ? 8 : 4));
const MAX_TOKENS = 40;

const s: ModelSuite = modelSuite({ ORG_MAX_CONCURRENCY: '16' });
const sdk = () =>
  new OpenAI({ apiKey: s.key, baseURL: `${s.server.url}/v1`, maxRetries: 0, timeout: 30_000 });

type Field = 'messages' | 'tools' | 'functions' | 'function_call' | 'response_format' | 'instructions';
type Caller = 'stays' | 'hangs-up-json' | 'drops-stream' | 'leaves-before-first';
interface Spec {
  field: Field;
  bytes: number;
  caller: Caller;
  /** drops-stream: after this many content chunks. */
  after: number;
}

const spec: fc.Arbitrary<Spec> = fc.record({
  field: fc.constantFrom<Field>(
    'messages',
    'tools',
    'functions',
    'function_call',
    'response_format',
    'instructions',
  ),
  bytes: fc.integer({ min: 100, max: 20_000 }),
  caller: fc.constantFrom<Caller>('stays', 'hangs-up-json', 'drops-stream', 'leaves-before-first'),
  after: fc.integer({ min: 1, max: 5 }),
});

let nonce = 0;
/** Marks a call's user message, so its request is found among the provider's. */
const marker = (i: number) => `[call-${nonce}-${i}]`;

/** The provider has call `i`'s request. */
const atProvider = (i: number) =>
  s.fake.requests.some((r) => JSON.stringify(r.body.messages).includes(marker(i)));

const schema = (bytes: number) => ({ type: 'object', description: 'd'.repeat(bytes), properties: {} });

/** The request of a spec, on chat (or /v1/responses for `instructions`). */
function chatBody(x: Spec, i: number): Record<string, unknown> {
  const messages = [
    { role: 'user', content: `${marker(i)} ` + (x.field === 'messages' ? 'm '.repeat(x.bytes / 2) : '') },
  ];
  const body: Record<string, unknown> = { model: 'x', max_tokens: MAX_TOKENS, messages };
  if (x.field === 'tools')
    body.tools = [{ type: 'function', function: { name: 't', parameters: schema(x.bytes) } }];
  if (x.field === 'functions') body.functions = [{ name: 'f', parameters: schema(x.bytes) }];
  if (x.field === 'function_call') body.function_call = { name: 'f'.repeat(x.bytes) };
  if (x.field === 'response_format')
    body.response_format = { type: 'json_schema', json_schema: { name: 'r', schema: schema(x.bytes) } };
  return body;
}

/** One call as its caller behaves; resolves once the caller is done (the call may still be settling). */
async function makeCall(x: Spec, i: number, release: Promise<void>): Promise<{ read: string }> {
  const controller = new AbortController();
  const stream = x.caller === 'drops-stream' || x.caller === 'leaves-before-first';
  const opts = { signal: controller.signal };
  let read = '';
  if (x.field === 'instructions') {
    const req = {
      model: 'x',
      max_output_tokens: MAX_TOKENS,
      input: marker(i),
      instructions: 'i'.repeat(x.bytes),
    };
    if (x.caller === 'hangs-up-json' || x.caller === 'leaves-before-first') {
      const pending = (
        stream ? sdk().responses.create({ ...req, stream: true }, opts) : sdk().responses.create(req, opts)
      ).catch(() => null);
      await waitUntil(() => atProvider(i), 10_000);
      controller.abort();
      await pending;
      return { read };
    }
    if (!stream) {
      await release;
      return { read: (await sdk().responses.create(req)).output_text };
    }
    const events = await sdk().responses.create({ ...req, stream: true }, opts);
    let chunks = 0;
    await (async () => {
      for await (const e of events) {
        if (e.type !== 'response.output_text.delta') continue;
        read += e.delta;
        if (++chunks === x.after) controller.abort();
      }
    })().catch(() => {});
    return { read };
  }
  const body = chatBody(x, i) as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming;
  if (x.caller === 'hangs-up-json' || x.caller === 'leaves-before-first') {
    const pending = (
      stream
        ? sdk().chat.completions.create({ ...body, stream: true }, opts)
        : sdk().chat.completions.create(body, opts)
    ).catch(() => null);
    await waitUntil(() => atProvider(i), 10_000);
    controller.abort();
    await pending;
    return { read };
  }
  if (!stream) return { read: (await sdk().chat.completions.create(body)).choices[0]!.message.content ?? '' };
  const chunks = await sdk().chat.completions.create({ ...body, stream: true }, opts);
  let n = 0;
  await (async () => {
    for await (const c of chunks) {
      const piece = c.choices[0]?.delta.content;
      if (!piece) continue;
      read += piece;
      if (++n === x.after) controller.abort();
    }
  })().catch(() => {});
  return { read };
}

async function usageSince(since: number) {
  const [row] = await queryRows<{ debited: unknown; rows: unknown }>(
    s.server.deps.db,
    sql`select coalesce(sum(abs(amount)), 0) as debited, count(*) as rows from billing_entries
        where type = 'usage' and org_key = ${s.owner.orgKey} and id > ${since}`,
  );
  return { debited: Number(row!.debited), rows: Number(row!.rows) };
}

describe('the model path bills every received call once, whatever the request and the caller (CONTRACT §9)', () => {
  it('random shapes and caller behaviours, concurrent on PostgreSQL', { timeout: 600_000 }, async () => {
    let seen = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(spec, { minLength: 2, maxLength: 6 }), async (specs) => {
        nonce++;
        s.fake.reset();
        s.fake.promptFromFields = true;
        s.fake.chunkDelayMs = 5;
        s.fake.reply = () => ({ content: Array.from({ length: 30 }, (_, k) => `w${k}`).join(' ') });
        await setOrgBalance(s.server, s.owner.orgKey, 2_000_000);
        const [last] = await queryRows<{ id: unknown }>(
          s.server.deps.db,
          sql`select coalesce(max(id), 0) as id from billing_entries`,
        );
        const since = Number(last!.id);
        const firstRequest = s.fake.requests.length + s.fake.responsesRequests.length;
        const firstReceived = s.fake.received.length;
        // Callers that leave do so while the provider still holds their answer; the rest wait for it.
        const releaseAnswers = s.fake.holdAnswers();
        let opened!: () => void;
        const release = new Promise<void>((r) => (opened = r));
        const leavers = specs.filter(
          (x) => x.caller === 'hangs-up-json' || x.caller === 'leaves-before-first',
        );
        const run = async (x: Spec, i: number) => makeCall(x, i, release);
        // Leavers first (each waits for the provider to have its request, then leaves), then the rest.
        const leaving = concurrent
          ? await Promise.all(leavers.map((x) => run(x, specs.indexOf(x))))
          : await leavers.reduce<Promise<{ read: string }[]>>(
              async (acc, x) => [...(await acc), await run(x, specs.indexOf(x))],
              Promise.resolve([]),
            );
        void leaving;
        releaseAnswers();
        opened();
        const stayers = specs.filter((x) => !leavers.includes(x));
        const results = concurrent
          ? await Promise.all(stayers.map((x) => run(x, specs.indexOf(x))))
          : await stayers.reduce<Promise<{ read: string }[]>>(
              async (acc, x) => [...(await acc), await run(x, specs.indexOf(x))],
              Promise.resolve([]),
            );
        const received = s.fake.received.length - firstReceived;
        expect(received).toBe(specs.length);
        // Every received request billed exactly once.
        await waitUntil(async () => (await usageSince(since)).rows >= received, 20_000);
        await waitUntil(async () => (await orgLedger(s.server, s.owner.orgKey)).openHolds <= 1, 20_000);
        const usage = await usageSince(since);
        expect(usage.rows).toBe(received);
        // What each must have cost, from what the provider counted and what its caller read.
        // What each must have cost: a completed call exactly what the provider counted (its prompt from
        // every field, 30 words at 2 credits); a call cut short at least its prompt and what its caller
        // read (tokenizer), at most its prompt and its output cap.
        const bodies = s.fake.requests
          .slice(firstRequest)
          .map((r) => r.body as unknown as Record<string, unknown>);
        expect(bodies).toHaveLength(specs.length);
        const stayed = new Map(stayers.map((x, k) => [x, results[k]!]));
        let least = 0;
        let most = 0;
        for (const [i, x] of specs.entries()) {
          const body = bodies.find((b) => JSON.stringify(b.messages).includes(marker(i)))!;
          expect(body).toBeDefined();
          if (x.caller === 'stays' || x.caller === 'hangs-up-json') {
            const exact = fieldPromptTokens(body) + 2 * 30;
            least += exact;
            most += exact;
          } else {
            least += (await countedCall(body, stayed.get(x)?.read ?? '')).debit;
            most += (await countedCall(body, '')).prompt + 2 * MAX_TOKENS;
          }
        }
        expect(usage.debited).toBeGreaterThanOrEqual(least);
        expect(usage.debited).toBeLessThanOrEqual(most);
        const debt = (await accountBalance(s.server.deps.db, debtAccount(s.owner.userId)))?.balance ?? 0;
        expect(debt).toBe(0);
        expect(await checkInvariants(s.server.deps.db)).toEqual([]);
        seen++;
      }),
      { numRuns: RUNS },
    );
    expect(seen).toBe(RUNS);
  });
});
