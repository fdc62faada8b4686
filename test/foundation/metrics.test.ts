import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { modelSuite } from '../helpers/model-suite.js';
import { orgAccountRow, setOrgBalance } from '../helpers/billing.js';
import { startTestServer } from '../helpers/server.js';
import { call } from '../helpers/http.js';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';

// GET /metrics: guarded by METRICS_TOKEN, in the Prometheus text format, counting what happened: requests
// by route template, model calls by outcome with the credits debited equal to what the ledger lost.

const TOKEN = 'metrics-token-0123456789abcdef';
const suite = modelSuite({ METRICS_TOKEN: TOKEN });

async function scrape(): Promise<string> {
  const res = await fetch(`${suite.server.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.text();
}

/** The value of one sample (name and exact label set as prom-client writes them), 0 when absent. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number {
  const body = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .join(',');
  const key = body ? `${name}{${body}}` : name;
  const line = text.split('\n').find((l) => l.startsWith(`${key} `));
  return line ? Number(line.slice(key.length + 1)) : 0;
}

describe('GET /metrics', () => {
  it('answers only a bearer of METRICS_TOKEN', async () => {
    expect((await call(suite.server.url, 'GET', '/metrics')).status).toBe(401);
    const wrong = await call(suite.server.url, 'GET', '/metrics', { token: `${TOKEN}x` });
    expect(wrong.status).toBe(401);
    expect(wrong.headers.get('www-authenticate')).toMatch(/^Bearer/);
    // A session is not the metrics token.
    expect((await call(suite.server.url, 'GET', '/metrics', { token: suite.owner.session })).status).toBe(
      401,
    );
  });

  it('does not exist without METRICS_TOKEN', async () => {
    const other = await startTestServer();
    try {
      expect((await call(other.url, 'GET', '/metrics')).status).toBe(404);
    } finally {
      await other.close();
    }
  });

  it('counts requests by route template and model calls with the credits the ledger lost', async () => {
    const before = await scrape();
    const balanceBefore = (await orgAccountRow(suite.server, suite.owner.orgKey)).balance;
    const openai = new OpenAI({ apiKey: suite.key, baseURL: `${suite.server.url}/v1`, maxRetries: 0 });
    const messages = [{ role: 'user' as const, content: 'Hello there' }];
    await openai.chat.completions.create({ model: 'any', messages, max_tokens: 20 });
    const stream = await openai.chat.completions.create({
      model: 'any',
      messages,
      max_tokens: 20,
      stream: true,
    });
    for await (const _ of stream) void _;
    const members = `/v1/clients/${suite.owner.clientId}/members`;
    expect((await call(suite.server.url, 'GET', members, { token: suite.owner.session })).status).toBe(200);
    expect((await call(suite.server.url, 'GET', '/no/such/route')).status).toBe(404);
    const balanceAfter = (await orgAccountRow(suite.server, suite.owner.orgKey)).balance;
    // Out of credits: 402, counted under the chat route's template.
    await setOrgBalance(suite.server, suite.owner.orgKey, 0);
    await expect(openai.chat.completions.create({ model: 'any', messages })).rejects.toMatchObject({
      status: 402,
    });

    const after = await scrape();
    const delta = (name: string, labels: Record<string, string> = {}) =>
      sample(after, name, labels) - sample(before, name, labels);
    const chat = { route: '/v1/chat/completions', method: 'POST' };
    expect(delta('svc_http_requests_total', { ...chat, status: '200' })).toBe(2);
    expect(delta('svc_http_requests_total', { ...chat, status: '402' })).toBe(1);
    expect(
      delta('svc_http_requests_total', {
        route: '/v1/clients/:client_id/members',
        method: 'GET',
        status: '200',
      }),
    ).toBe(1);
    expect(delta('svc_http_requests_total', { route: 'unmatched', method: 'GET', status: '404' })).toBe(1);
    expect(delta('svc_http_request_duration_seconds_count', { ...chat, status: '200' })).toBe(2);
    expect(delta('svc_model_calls_total', { outcome: 'completed' })).toBe(2);
    expect(delta('svc_model_first_byte_seconds_count')).toBe(1);
    // The credits counted are exactly what the ledger took from the client.
    expect(balanceBefore - balanceAfter).toBeGreaterThan(0);
    expect(delta('svc_model_credits_debited_total')).toBe(balanceBefore - balanceAfter);
    // Process metrics and the database gauges are there.
    expect(after).toMatch(/^svc_process_cpu_user_seconds_total /m);
    expect(after).toMatch(/^svc_billing_holds_outstanding /m);
    expect(after).toMatch(/^svc_concurrency_leases_outstanding /m);
    // The calls are over: their provider connection is kept alive for the next one, none is in use.
    expect(sample(after, 'svc_upstream_connections', { state: 'idle' })).toBeGreaterThanOrEqual(1);
    expect(sample(after, 'svc_upstream_connections', { state: 'busy' })).toBe(0);
    // No call is waiting for a concurrency slot.
    expect(after).toMatch(/^svc_model_admissions_waiting 0$/m);
  });

  it('counts usage beyond the hold: calls, tokens debited and tokens owed, as the ledger recorded them', async () => {
    await setOrgBalance(suite.server, suite.owner.orgKey, 3_000);
    // A prompt reported at 5,000 tokens on a hold of about 2 + 2 × 10: 3,000 from the balance (the hold,
    // then the excess), 2,010 owed.
    suite.fake.reply = () => ({ content: 'one two three four five', promptTokens: 5_000 });
    const before = await scrape();
    const openai = new OpenAI({ apiKey: suite.key, baseURL: `${suite.server.url}/v1`, maxRetries: 0 });
    const res = await openai.chat.completions
      .create({ model: 'any', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 })
      .withResponse();
    const requestId = res.response.headers.get('x-svc-request-id')!;
    const after = await scrape();
    const delta = (name: string) => sample(after, name) - sample(before, name);
    const rows = await queryRows<{ key: string; amount: unknown }>(
      suite.server.deps.db,
      sql`select key, amount from billing_entries where key like ${`usage:${requestId}%`}`,
    );
    const row = (suffix: string) =>
      Number(rows.find((r) => r.key === `usage:${requestId}${suffix}`)?.amount ?? 0);
    expect(row(':excess')).toBeGreaterThan(0);
    expect(row('') + row(':excess')).toBe(3_000);
    expect(row(':debt')).toBe(5_010 - 3_000);
    expect(delta('svc_billing_excess_calls_total')).toBe(1);
    expect(delta('svc_billing_excess_debited_credits_total')).toBe(row(':excess'));
    expect(delta('svc_billing_excess_debt_credits_total')).toBe(row(':debt'));
  });
});
