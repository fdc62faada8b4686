import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import WebSocket from 'ws';
import { sql } from 'drizzle-orm';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { modelSuite } from '../helpers/model-suite.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { type FakeUpstream } from '../helpers/fake-upstream.js';
import {
  expireStaleHolds,
  orgBalanceCredits,
  reserveCredits,
  settleCredits,
} from '../../src/billing/spend.js';
import { queryRows } from '../../src/db/client.js';
import { client } from '../helpers/http.js';
import { anything, containing, detailOf, parseAs } from '../helpers/json.js';
import { eventually } from '../helpers/eventually.js';
import type { ServerFrame } from '../../src/runs/frames.js';
import type { UsageCalls, UsageSummary } from '../helpers/answers.js';

// The usage API (docs/usage.md) against real calls through the openai SDK and the run socket,
// with a fake provider. The truth is the ledger: the usage rows (`billing_entries` of type usage) and the
// balance each call took, seen from outside.

let server: TestServer;
let fake: FakeUpstream;
let owner: TestUser;
let key: string;
const suite = modelSuite();

let member: TestUser;
let memberKey: string;
let viewer: TestUser;
let outsider: TestUser;
let grantToken: string;
let grantId: string;
let ownerTokenId: number;
let memberTokenId: number;
/** What each call took from the balance, by who made it and with what. */
const spent: { who: string; credential: string; debit: number; prompt: number; completion: number }[] = [];
let periodFrom: number;

const sdk = (apiKey: string, base = server.url) =>
  new OpenAI({ apiKey, baseURL: `${base}/v1`, maxRetries: 0, timeout: 10_000 });
const balance = () => orgBalanceCredits(server.deps.db, owner.orgKey);
const api = () => client(server.url);

async function chat(who: TestUser, credential: string, token: string, base = server.url, content = 'hi') {
  const before = await balance();
  const res = await sdk(token, base).chat.completions.create({
    model: 'x',
    messages: [{ role: 'user', content }],
  });
  spent.push({
    who: who.userId,
    credential,
    debit: before - (await balance()),
    prompt: res.usage!.prompt_tokens,
    completion: res.usage!.completion_tokens,
  });
}

/** A run of one step (the fake answers without tool calls) with the member's token. */
async function run(token: string) {
  const before = await balance();
  const ws = new WebSocket(`${server.url.replace('http', 'ws')}/v1/runs/ws`);
  const done = new Promise<Extract<ServerFrame, { type: 'run_completed' }>>((resolve, reject) => {
    ws.on('message', (d) => {
      const frame = parseAs<ServerFrame>((d as Buffer).toString());
      if (frame.type === 'authenticated')
        ws.send(
          JSON.stringify({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'go' }] }),
        );
      if (frame.type === 'run_completed') resolve(frame);
      if (frame.type === 'error') reject(new Error(JSON.stringify(frame)));
    });
    ws.once('error', reject);
  });
  await new Promise<void>((resolve) => ws.once('open', () => resolve()));
  ws.send(JSON.stringify({ type: 'auth', token }));
  const frame = await done;
  ws.close();
  spent.push({
    who: member.userId,
    credential: `token:${memberTokenId}`,
    debit: before - (await balance()),
    prompt: frame.usage.prompt_tokens,
    completion: frame.usage.completion_tokens,
  });
}

beforeAll(async () => {
  ({ server, fake, owner, key } = suite);
  periodFrom = Math.floor(Date.now() / 1000) - 1;
  member = await createUser(server);
  viewer = await createUser(server);
  outsider = await createUser(server);
  await addMember(server, owner.orgKey, member.userId, 'member');
  await addMember(server, owner.orgKey, viewer.userId, 'viewer');
  const mt = await createApiToken(server, member, owner.orgKey, 'member-ci');
  memberKey = mt.secret;
  memberTokenId = mt.id;
  const [t] = await queryRows<{ id: number }>(
    server.deps.db,
    sql`select id from api_tokens where user_id = ${owner.userId} and revoked_at is null`,
  );
  ownerTokenId = Number(t!.id);
  const grants = await issueTestGrants(server, owner, { orgKey: owner.orgKey, resources: ['model'] });
  grantToken = grants.model!;
  grantId = grants.grantIds.model!;

  fake.reply = () => ({ content: 'one two three', promptTokens: 7 });
  await chat(owner, `token:${ownerTokenId}`, key);
  await chat(owner, `token:${ownerTokenId}`, key);
  fake.reply = () => ({ content: 'a b', promptTokens: 11 });
  await chat(member, `token:${memberTokenId}`, memberKey);
  await chat(owner, `grant:${grantId}`, grantToken, server.v2Url);
  // A call that costs nothing: no ledger row, but a usage record.
  fake.reply = () => ({ content: '', promptTokens: 0 });
  await chat(member, `token:${memberTokenId}`, memberKey);
  fake.reply = () => ({ content: 'done here', promptTokens: 5 });
  await run(memberKey);
});

const sumOf = (rows: typeof spent) => ({
  calls: rows.length,
  prompt_tokens: rows.reduce((s, r) => s + r.prompt, 0),
  completion_tokens: rows.reduce((s, r) => s + r.completion, 0),
  credits_debited: rows.reduce((s, r) => s + r.debit, 0),
});

async function ledgerUsageTotal(orgKey: string): Promise<number> {
  const [row] = await queryRows<{ total: unknown }>(
    server.deps.db,
    sql`select coalesce(sum(amount), 0) as total from billing_entries where org_key = ${orgKey} and type = 'usage'`,
  );
  return Number(row!.total);
}

/** GET …/usage (a summary by default; `UsageCalls` with path '/calls'; `string` with format=csv). */
const usage = <T = UsageSummary>(who: TestUser, query: Record<string, string | number> = {}, path = '') =>
  api().get<T>(`/v1/clients/${owner.clientId}/usage${path}`, { token: who.session, query });

describe('usage totals', () => {
  it('the totals equal the ledger usage rows and what each call took, the zero-cost call counted', async () => {
    const res = await usage(owner);
    expect(res.status).toBe(200);
    expect(res.body.totals).toMatchObject(sumOf(spent));
    expect(res.body.totals.calls).toBe(6);
    expect(res.body.totals.credits_debited).toBe(await ledgerUsageTotal(owner.orgKey));
    expect(spent.some((s) => s.debit === 0)).toBe(true);
    // At the fake's prices (90,000 and 180,000 ¢/M), the exact cost is 0.09 ¢ per prompt token and 0.18 ¢
    // per completion token.
    const t = res.body.totals;
    expect(Number(res.body.totals.cost_cents)).toBeCloseTo(
      t.prompt_tokens * 0.09 + t.completion_tokens * 0.18,
      9,
    );
  });

  it('by member, by credential (token and OAuth grant) and by model, each group as the calls show', async () => {
    const byMember = (await usage(owner, { group_by: 'member' })).body;
    for (const who of [owner, member]) {
      const row = byMember.data.find((r) => r.key === who.userId);
      expect(row).toMatchObject({ ...sumOf(spent.filter((s) => s.who === who.userId)), label: who.email });
    }
    expect(byMember.data).toHaveLength(2);

    const byCredential = (await usage(owner, { group_by: 'credential' })).body;
    const keys = [...new Set(spent.map((s) => s.credential))].sort();
    expect(byCredential.data.map((r) => r.key).sort()).toEqual(keys);
    for (const k of keys) {
      const row = byCredential.data.find((r) => r.key === k);
      expect(row).toMatchObject(sumOf(spent.filter((s) => s.credential === k)));
    }
    expect(byCredential.data.find((r) => r.key === `token:${memberTokenId}`)!.label).toBe(
      'API token member-ci',
    );
    expect(byCredential.data.find((r) => r.key === `grant:${grantId}`)!.label).toMatch(/^App /);

    const byModel = (await usage(owner, { group_by: 'model' })).body;
    expect(byModel.data).toEqual([containing({ key: 'svc-test-model', ...sumOf(spent) })]);

    const byDay = (await usage(owner, { group_by: 'day' })).body;
    expect(byDay.data.reduce((s, r) => s + r.credits_debited, 0)).toBe(sumOf(spent).credits_debited);
    expect(byDay.data[0]!.key).toMatch(/^\d{4}-\d{2}-\d{2}$/);
  });

  it('a period before the calls is empty', async () => {
    const empty = (await usage(owner, { from: periodFrom - 3600, to: periodFrom })).body;
    expect(empty.totals).toEqual({
      calls: 0,
      prompt_tokens: 0,
      completion_tokens: 0,
      cached_prompt_tokens: 0,
      credits_debited: 0,
      cost_cents: '0',
    });
    expect(empty.data).toEqual([]);
  });

  it('CSV export: the same groups and a total line', async () => {
    const res = await usage<string>(owner, { group_by: 'member', format: 'csv' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/csv/);
    expect(res.headers.get('content-disposition')).toMatch(
      /attachment; filename="usage-client_.*-member\.csv"/,
    );
    const lines = res.body.trimEnd().split('\r\n');
    expect(lines[0]).toBe(
      'key,label,calls,prompt_tokens,completion_tokens,credits_debited,compute_cost_cents,cached_prompt_tokens,debited_usd',
    );
    expect(lines).toHaveLength(4);
    const total = lines[3]!.split(',');
    expect(total[0]).toBe('total');
    expect(Number(total[5])).toBe(sumOf(spent).credits_debited);
    // The debit in money at par (1,000 tokens = 1 dollar), exact to the tenth of a cent.
    expect(total[8]).toBe((sumOf(spent).credits_debited / 1000).toFixed(3));
  });
});

describe('the call log', () => {
  it('lists every call newest first with who, which credential, tokens, cost, debit and outcome', async () => {
    const res = await usage<UsageCalls>(owner, {}, '/calls');
    expect(res.status).toBe(200);
    const calls = res.body.data;
    expect(calls).toHaveLength(6);
    expect(calls.map((c) => c.credits_debited)).toEqual(spent.map((s) => s.debit).reverse());
    const [runStep, zero] = calls;
    expect(runStep).toMatchObject({ source: 'run', user_id: member.userId, outcome: 'completed' });
    expect(runStep!.run_id).toMatch(/./);
    expect(zero).toMatchObject({
      credits_debited: 0,
      prompt_tokens: 0,
      completion_tokens: 0,
      cost_cents: '0',
    });
    const viaGrant = calls.find((c) => c.credential.type === 'oauth_grant');
    expect(viaGrant!.credential).toMatchObject({ grant_id: grantId, client_id: 'svc-cli' });
    expect(calls[5]!.credential).toEqual({ type: 'api_token', token_id: ownerTokenId, token_name: 'test' });
    expect(calls[5]).toMatchObject({
      source: 'chat',
      model: 'svc-test-model',
      prompt_tokens: 7,
      completion_tokens: 3,
    });
    expect(calls[5]!.duration_ms).toBeGreaterThanOrEqual(0);
    // Each record's debit is its call's usage ledger row (usage:<request id>), or none for 0.
    const rows = await queryRows<{ key: string; amount: unknown }>(
      server.deps.db,
      sql`select key, amount from billing_entries where org_key = ${owner.orgKey} and type = 'usage'`,
    );
    const ledger = new Map(rows.map((r) => [r.key, Number(r.amount)]));
    for (const c of calls) expect(ledger.get(`usage:${c.id}`) ?? 0).toBe(c.credits_debited);
  });

  it('pages by limit and offset; the pages together are the whole log', async () => {
    const all = (await usage<UsageCalls>(owner, {}, '/calls')).body.data.map((c) => c.id);
    const pages: string[] = [];
    for (let offset = 0; offset < 8; offset += 4) {
      const res = await usage<UsageCalls>(owner, { limit: 4, offset }, '/calls');
      expect(res.status).toBe(200);
      pages.push(...res.body.data.map((c) => c.id));
    }
    expect(pages).toEqual(all);
    expect((await usage<UsageCalls>(owner, { limit: 2, offset: 6 }, '/calls')).body.data).toEqual([]);
  });

  it('CSV export of the calls', async () => {
    const res = await usage<string>(owner, { format: 'csv' }, '/calls');
    expect(res.status).toBe(200);
    const lines = res.body.trimEnd().split('\r\n');
    expect(lines).toHaveLength(7);
    const header = lines[0]!.split(',');
    expect(header).toContain('credits_debited');
    expect(header).toContain('compute_cost_cents');
    expect(header).not.toContain('cost_cents');
    for (const line of lines.slice(1)) {
      const cells = line.split(',');
      const debited = Number(cells[header.indexOf('credits_debited')]);
      expect(cells[header.indexOf('debited_usd')]).toBe((debited / 1000).toFixed(3));
    }
    expect(lines.slice(1).some((l) => l.includes(`grant:${grantId}`))).toBe(true);
  });
});

describe('who may read', () => {
  it('members read everything; viewers only the totals by day and model; outsiders nothing', async () => {
    expect((await usage(member, { group_by: 'member' })).status).toBe(200);
    expect((await usage(member, {}, '/calls')).status).toBe(200);

    const v = await usage(viewer, { group_by: 'day' });
    expect(v.status).toBe(200);
    expect(v.body.totals.credits_debited).toBe(sumOf(spent).credits_debited);
    expect((await usage(viewer, { group_by: 'model' })).status).toBe(200);
    for (const res of [
      await usage(viewer, { group_by: 'member' }),
      await usage(viewer, { group_by: 'credential' }),
      await usage(viewer, {}, '/calls'),
      await usage(outsider),
      await usage(outsider, {}, '/calls'),
    ]) {
      expect(res.status).toBe(403);
      expect(detailOf(res.body).code).toBe('NO_ACCESS');
    }
  });

  it('an svc_ token reads its own client only; no credential is 401; either id spelling', async () => {
    expect((await api().get(`/v1/clients/${owner.clientId}/usage`, { token: key })).status).toBe(200);
    expect((await api().get(`/v1/clients/${owner.orgId}/usage/calls`, { token: key })).status).toBe(200);
    const outsiderKey = (await createApiToken(server, outsider, outsider.orgKey)).secret;
    expect((await api().get(`/v1/clients/${owner.clientId}/usage`, { token: outsiderKey })).status).toBe(403);
    const anon = await api().get(`/v1/clients/${owner.clientId}/usage`);
    expect(anon.status).toBe(401);
    expect(detailOf(anon.body).code).toBe('INVALID_TOKEN');
  });
});

describe('bad input', () => {
  it.each([
    [{ group_by: 'week' }, ''],
    [{ from: '1e9' }, ''],
    [{ from: '-5' }, ''],
    [{ from: 2000, to: 1000 }, ''],
    [{ from: 0, to: 400 * 86_400 + 1 }, ''],
    [{ format: 'xml' }, ''],
    [{ limit: 0 }, '/calls'],
    [{ limit: 101 }, '/calls'],
    [{ offset: -1 }, '/calls'],
    [{ limit: 'ten' }, '/calls'],
  ])('%j on usage%s: 400 VALIDATION_ERROR', async (query, path) => {
    const res = await usage(owner, query, path);
    expect(res.status).toBe(400);
    expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
  });

  it('an unknown client id: 403, never 500', async () => {
    for (const id of ['client_nope', 'garbage', 'org_' + 'x'.repeat(300)]) {
      expect((await api().get(`/v1/clients/${id}/usage`, { token: owner.session })).status).toBe(403);
    }
  });
});

describe.runIf(storageMode() === 'postgres')('across models', () => {
  it('a second process with another MODEL_ID on the same database: grouped per model', async () => {
    const second = await startTestServer({
      databaseUrl: server.databaseUrl,
      env: fake.env({ MODEL_ID: 'svc-other-model' }),
    });
    try {
      fake.reply = () => ({ content: 'x y z', promptTokens: 4 });
      const before = await balance();
      await sdk(key, second.url).chat.completions.create({
        model: 'x',
        messages: [{ role: 'user', content: 'a' }],
      });
      const debit = before - (await balance());
      const byModel = (await usage(owner, { group_by: 'model' })).body;
      expect(byModel.data.map((r) => r.key)).toEqual(['svc-other-model', 'svc-test-model']);
      expect(byModel.data[0]).toMatchObject({
        calls: 1,
        credits_debited: debit,
        prompt_tokens: 4,
        completion_tokens: 3,
      });
      expect(byModel.totals.credits_debited).toBe(await ledgerUsageTotal(owner.orgKey));
    } finally {
      await second.close();
    }
  });
});

describe('records written by the settle', () => {
  it('a hold that expired before its settle still leaves one record with what was debited', async () => {
    const requestId = `req_expired_${Date.now()}`;
    await reserveCredits(server.deps.db, {
      orgKey: owner.orgKey,
      userId: owner.userId,
      requestId,
      minCredits: 1,
      maxCredits: 50,
      ttlSeconds: 0.001,
    });
    await eventually(
      async () =>
        (
          await queryRows<{ expired: boolean }>(
            server.deps.db,
            sql`select expires_at < now() as expired from billing_holds where request_id = ${requestId}`,
          )
        )[0]!.expired === true,
      5_000,
      "the hold's expiry passed",
    );
    await expireStaleHolds(server.deps.db);
    const record = {
      org: owner.orgKey,
      user: owner.userId,
      api_token_id: ownerTokenId,
      oauth_grant_id: null,
      oauth_client_id: null,
      source: 'chat' as const,
      run_id: null,
      model: 'svc-test-model',
      prompt_tokens: 10,
      completion_tokens: 5,
      price_input: 90_000,
      price_output: 180_000,
      duration_ms: 3,
      outcome: 'completed' as const,
    };
    const settled = await settleCredits(server.deps.db, {
      requestId,
      actualCredits: 20,
      description: 'slow',
      usage: record,
    });
    expect(settled.debitedCredits).toBe(20);
    // Settled again (a retry): the first result stands and no second record appears.
    await settleCredits(server.deps.db, { requestId, actualCredits: 20, description: 'slow', usage: record });
    const rows = await queryRows<{ credits_debited: unknown; cost_cents: string }>(
      server.deps.db,
      sql`select credits_debited, trim_scale(cost_cents)::text as cost_cents from usage_records where request_id = ${requestId}`,
    );
    expect(rows).toEqual([{ credits_debited: anything(), cost_cents: '1.8' }]);
    expect(Number(rows[0]!.credits_debited)).toBe(20);
  });
});
