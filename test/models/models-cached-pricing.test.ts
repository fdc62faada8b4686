import { describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { modelSuite, type ModelSuite } from '../helpers/model-suite.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { queryRows } from '../../src/db/client.js';
import { client } from '../helpers/http.js';
import { ConfigError, loadConfig } from '../../src/config.js';
import type { CompletionUsage } from 'openai/resources/completions';
import type { UsageCalls, UsageSummary } from '../helpers/answers.js';

// Cached-token pricing (docs/billing.md "Cached prompt tokens"): the fake provider reports
// usage.prompt_tokens_details.cached_tokens in JSON replies and in the stream's usage chunk; svc prices
// those at MODEL_PRICE_CACHED_INPUT and the rest of the prompt at MODEL_PRICE_INPUT. Every debit is
// checked against the ledger (the call's `usage` row and the balance) and against a figure worked out
// here in integers: with input 90,000, cached 22,500 and output 180,000 ¢/M, round(cost_cents × 1000 / 90)
// = round(((prompt − cached) × 4 + cached + completion × 8) / 4).

const CACHED_PRICE = '22500';

/** The debit, worked out independently of src/models/metering/pricing.ts (quarters of a token, exact). */
const expectedDebit = (prompt: number, cached: number, completion: number) =>
  Math.round(((prompt - cached) * 4 + cached + completion * 8) / 4);

const words = (n: number) => Array.from({ length: n }, (_, i) => `w${i}`).join(' ');

interface Observed {
  requestId: string;
  debit: number;
  ledger: { amount: number; description: string };
  record: {
    prompt_tokens: number;
    cached_prompt_tokens: number;
    cost_cents: string;
    credits_debited: number;
  };
  clientUsage: CompletionUsage | undefined;
}

/** One call with the provider reporting (prompt, cached, completion); what the ledger and record say. */
async function call(
  s: ModelSuite,
  prompt: number,
  cached: unknown,
  completion: number,
  stream: boolean,
): Promise<Observed> {
  s.fake.reply = () => ({ content: words(completion), promptTokens: prompt, cachedTokens: cached });
  const balance = () => orgBalanceCredits(s.server.deps.db, s.owner.orgKey);
  const sdk = new OpenAI({ apiKey: s.key, baseURL: `${s.server.url}/v1`, maxRetries: 0, timeout: 10_000 });
  const before = await balance();
  const messages = [{ role: 'user' as const, content: 'hi' }];
  let requestId: string;
  let clientUsage: CompletionUsage | undefined;
  if (stream) {
    const { data, response } = await sdk.chat.completions
      .create({ model: 'x', messages, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    for await (const chunk of data) if (chunk.usage) clientUsage = chunk.usage;
    requestId = response.headers.get('x-svc-request-id')!;
  } else {
    const { data, response } = await sdk.chat.completions.create({ model: 'x', messages }).withResponse();
    clientUsage = data.usage;
    requestId = response.headers.get('x-svc-request-id')!;
  }
  const debit = before - (await balance());
  const [ledger] = await queryRows<{ amount: unknown; description: string }>(
    s.server.deps.db,
    sql`select amount, description from billing_entries where key = ${`usage:${requestId}`}`,
  );
  const calls = await client(s.server.url).get<UsageCalls>(`/v1/clients/${s.owner.clientId}/usage/calls`, {
    token: s.owner.session,
    query: { limit: 100 },
  });
  expect(calls.status).toBe(200);
  const record = calls.body.data.find((c) => c.id === requestId)!;
  return {
    requestId,
    debit,
    ledger: { amount: Number(ledger?.amount ?? 0), description: ledger?.description ?? '' },
    record,
    clientUsage,
  };
}

describe('with MODEL_PRICE_CACHED_INPUT set', () => {
  const s = modelSuite({ MODEL_PRICE_CACHED_INPUT: CACHED_PRICE });

  // (prompt, cached, completion): rounding up, down and at exactly a half; all cached; none cached.
  const triples: [number, number, number][] = [
    [10, 6, 5],
    [10, 3, 2],
    [7, 2, 3],
    [101, 101, 1],
    [10, 0, 5],
  ];

  for (const stream of [false, true])
    it(`debits cached prompt tokens at the cached price, the rest at the input price (${stream ? 'stream' : 'JSON'})`, async () => {
      for (const [prompt, cached, completion] of triples) {
        const o = await call(s, prompt, cached, completion, stream);
        const want = expectedDebit(prompt, cached, completion);
        expect(o.debit, `${prompt}/${cached}/${completion}`).toBe(want);
        expect(o.ledger.amount).toBe(want);
        expect(o.record).toMatchObject({
          prompt_tokens: prompt,
          cached_prompt_tokens: cached,
          credits_debited: want,
        });
        // cost_cents exact: (prompt − cached) × 0.09 + cached × 0.0225 + completion × 0.18
        const milli = (prompt - cached) * 900 + cached * 225 + completion * 1800; // ten-thousandths of a cent
        expect(Number(o.record.cost_cents) * 10_000).toBeCloseTo(milli, 6);
        if (cached) expect(o.ledger.description).toContain(`${prompt} in (${cached} cached)`);
        else expect(o.ledger.description).not.toContain('cached');
        // The client sees the provider's usage, details included.
        expect(o.clientUsage!.prompt_tokens_details?.cached_tokens).toBe(cached);
      }
    });

  it('clamps hostile cached counts: never below the cached floor, never above all-input', async () => {
    const allInput = expectedDebit(10, 0, 5);
    const allCached = expectedDebit(10, 10, 5);
    // Treated as 0: negative, fractional, a string, null.
    for (const bad of [-5, 2.5, '6', null, -1e9, { n: 3 }])
      for (const stream of [false, true]) {
        const o = await call(s, 10, bad, 5, stream);
        expect(o.debit, JSON.stringify(bad)).toBe(allInput);
        expect(o.record.cached_prompt_tokens).toBe(0);
      }
    // More than the prompt: clamped to the prompt (all of it at the cached price, no lower).
    for (const over of [11, 1e9, Number.MAX_SAFE_INTEGER])
      for (const stream of [false, true]) {
        const o = await call(s, 10, over, 5, stream);
        expect(o.debit, String(over)).toBe(allCached);
        expect(o.record.cached_prompt_tokens).toBe(10);
      }
  });

  it('the usage totals add up the cached prompt tokens', async () => {
    const res = await client(s.server.url).get<UsageSummary>(`/v1/clients/${s.owner.clientId}/usage`, {
      token: s.owner.session,
      query: { group_by: 'model' },
    });
    expect(res.status).toBe(200);
    const [sum] = await queryRows<{ cached: unknown }>(
      s.server.deps.db,
      sql`select coalesce(sum(cached_prompt_tokens), 0) as cached from usage_records where org_key = ${s.owner.orgKey}`,
    );
    expect(Number(sum!.cached)).toBeGreaterThan(0);
    expect(res.body.totals.cached_prompt_tokens).toBe(Number(sum!.cached));
  });
});

describe('with MODEL_PRICE_CACHED_INPUT unset', () => {
  const s = modelSuite();

  it('changes nothing: cached tokens cost what any prompt token costs (JSON and stream)', async () => {
    for (const stream of [false, true])
      for (const [prompt, cached, completion] of [
        [10, 6, 5],
        [7, 7, 3],
      ] as const) {
        const o = await call(s, prompt, cached, completion, stream);
        // 90,000 and 180,000 ¢/M: prompt + 2 × completion, as before cached pricing.
        expect(o.debit).toBe(prompt + 2 * completion);
        expect(o.ledger.amount).toBe(prompt + 2 * completion);
        // The split is still recorded.
        expect(o.record.cached_prompt_tokens).toBe(cached);
      }
  });
});

describe('MODEL_PRICE_CACHED_INPUT configuration', () => {
  it('defaults to the input price and may not exceed it (the hold prices the prompt at the input price)', () => {
    expect(loadConfig({ MODEL_PRICE_INPUT: '250' }).model.priceCachedInput).toBe(250);
    expect(
      loadConfig({ MODEL_PRICE_INPUT: '250', MODEL_PRICE_CACHED_INPUT: '125' }).model.priceCachedInput,
    ).toBe(125);
    expect(() => loadConfig({ MODEL_PRICE_INPUT: '250', MODEL_PRICE_CACHED_INPUT: '251' })).toThrow(
      ConfigError,
    );
    expect(() => loadConfig({ MODEL_PRICE_CACHED_INPUT: '-1' })).toThrow(/MODEL_PRICE_CACHED_INPUT/);
  });
});
