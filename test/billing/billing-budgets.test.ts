import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { queryRows } from '../../src/db/client.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { orgAccount } from '../../src/billing/ledger.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { noteBudgetExhausted } from '../../src/billing/budgets.js';
import { modelSuite } from '../helpers/model-suite.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { callChat, waitUntil } from '../helpers/chat-load.js';
import { client } from '../helpers/http.js';
import { detailError, readJson } from '../helpers/json.js';
import type { TestServer } from '../helpers/server.js';

// Member budgets. The owner gives a member (or one of the member's tokens) a budget per
// period; a call that the budget cannot cover gets 402 member_budget_exhausted even while the org has
// tokens, enforced by the hold itself (svc_reserve_budgeted), so concurrent calls cannot overspend it.
// The fake provider bills each call 20 tokens (10 prompt + 2 × 5 completion: model-suite.ts prices).

const budget = z.object({
  client_id: z.string(),
  user_id: z.string(),
  token_id: z.number().nullable(),
  period: z.enum(['day', 'week', 'month']),
  budget_credits: z.number(),
  spent_credits: z.number(),
  remaining_credits: z.number(),
  period_start: z.number(),
  period_end: z.number(),
});
const deviceCode = z.object({ device_code: z.string(), user_code: z.string() });
const myBudget = z.object({
  client_id: z.string(),
  user_id: z.string(),
  budget: budget.nullable(),
  token_budgets: z.array(budget),
});

let server: TestServer;
let owner: TestUser;
// Room for all 50 concurrent calls at once: the budget, not the concurrency cap, must refuse them.
const suite = modelSuite({ ORG_MAX_CONCURRENCY: '64' });
beforeAll(() => void ({ server, owner } = suite));

const sdk = (apiKey: string) =>
  new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 10_000 });

async function newMember(): Promise<{ user: TestUser; key: string; tokenId: number }> {
  const user = await createUser(server);
  await addMember(server, owner.orgKey, user.userId);
  const token = await createApiToken(server, user, owner.orgKey);
  return { user, key: token.secret, tokenId: token.id };
}

/** Σ of the `usage` debits of one member's calls in the owner's org (the ledger, through usage records). */
async function memberDebits(userId: string): Promise<number> {
  const [row] = await queryRows<{ total: unknown }>(
    server.deps.db,
    sql`select coalesce(sum(e.amount), 0) as total from billing_entries e
        join usage_records u on e.key = 'usage:' || u.request_id
        where e.type = 'usage' and e.from_account = ${orgAccount(owner.orgKey)} and u.user_id = ${userId}`,
  );
  return Number(row!.total);
}

async function putMemberBudget(userId: string, body: unknown, as = owner.session) {
  return client(server.url).put(`/v1/clients/${owner.clientId}/members/${userId}/budget`, body, {
    token: as,
  });
}

const readBudget = async (as: string) => {
  const res = await client(server.url).get(`/v1/clients/${owner.clientId}/budget`, { token: as });
  expect(res.status).toBe(200);
  return readJson(myBudget, res.body);
};

/** Calls one at a time until the first refusal; returns how many were answered and the refusal. */
async function callUntilRefused(key: string, max = 50) {
  for (let n = 0; n < max; n++) {
    const r = await callChat(server.url, key);
    if (r.status !== 200) return { answered: n, refusal: r };
  }
  throw new Error('never refused');
}

describe('member budgets: routes', () => {
  it('the owner sets and clears a budget; the member reads it; others may not set one', async () => {
    const { user } = await newMember();
    const set = await putMemberBudget(user.userId, { period: 'day', budget_credits: 500 });
    expect(set.status).toBe(200);
    const b = readJson(budget, set.body);
    expect(b).toMatchObject({
      client_id: owner.clientId,
      user_id: user.userId,
      token_id: null,
      period: 'day',
      budget_credits: 500,
      spent_credits: 0,
      remaining_credits: 500,
    });
    // UTC day boundaries.
    expect(b.period_start % 86_400).toBe(0);
    expect(b.period_end - b.period_start).toBe(86_400);

    const mine = await readBudget(user.session);
    expect(mine.budget).toMatchObject({ budget_credits: 500, period: 'day' });
    expect(mine.token_budgets).toEqual([]);

    // A member may not set budgets, not even their own; a non-member is 404; bad input 400.
    const selfSet = await putMemberBudget(
      user.userId,
      { period: 'day', budget_credits: 9_999 },
      user.session,
    );
    expect(selfSet.status).toBe(403);
    expect(readJson(detailError, selfSet.body).detail.code).toBe('NO_ACCESS');
    const stranger = await createUser(server);
    expect((await putMemberBudget(stranger.userId, { period: 'day', budget_credits: 1 })).status).toBe(404);
    const bad = await putMemberBudget(user.userId, { period: 'year', budget_credits: 1 });
    expect(bad.status).toBe(400);
    expect(readJson(detailError, bad.body).detail.code).toBe('VALIDATION_ERROR');
    expect((await putMemberBudget(user.userId, { period: 'week', budget_credits: -1 })).status).toBe(400);
    expect((await client(server.url).get(`/v1/clients/${owner.clientId}/budget`)).status).toBe(401);

    const list = await client(server.url).get(`/v1/clients/${owner.clientId}/budgets`, {
      token: owner.session,
    });
    expect(readJson(z.object({ data: z.array(budget) }), list.body).data).toContainEqual(b);
    expect(
      (await client(server.url).get(`/v1/clients/${owner.clientId}/budgets`, { token: user.session })).status,
    ).toBe(403);

    const path = `/v1/clients/${owner.clientId}/members/${user.userId}/budget`;
    expect((await client(server.url).delete(path, { token: owner.session })).body).toEqual({ removed: true });
    expect((await client(server.url).delete(path, { token: owner.session })).status).toBe(404);
    expect((await readBudget(user.session)).budget).toBeNull();
  });
});

describe('member budgets: the hold enforces them', () => {
  it('refuses 402 member_budget_exhausted (OpenAI shape) while the org still has tokens, on every way in', async () => {
    const { user, key, tokenId } = await newMember();
    expect((await putMemberBudget(user.userId, { period: 'month', budget_credits: 100 })).status).toBe(200);
    // The token alone (one-statement admission) …
    const { answered, refusal } = await callUntilRefused(key);
    expect(answered).toBeGreaterThan(0);
    expect(refusal).toMatchObject({ status: 402, code: 'member_budget_exhausted' });
    // … and the general way (naming the org), through the openai SDK.
    const err = await sdk(key)
      .chat.completions.create(
        { model: 'x', messages: [{ role: 'user', content: 'hi' }] },
        { headers: { 'x-svc-organisation': owner.orgId } },
      )
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(OpenAI.APIError);
    expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(402);
    // The OpenAI error object: the SDK reads its code, type and message.
    expect((err as InstanceType<typeof OpenAI.APIError>).code).toBe('member_budget_exhausted');
    expect((err as InstanceType<typeof OpenAI.APIError>).message).toMatch(/budget/);

    const spent = await memberDebits(user.userId);
    expect(spent).toBeLessThanOrEqual(100);
    expect(spent).toBe(20 * answered);
    expect(await orgBalanceCredits(server.deps.db, owner.orgKey)).toBeGreaterThan(5_000);
    // The owner's endpoints hear of it once for the period, however many calls were refused.
    const exhaustedEvents = async () =>
      Number(
        (
          await queryRows<{ n: unknown }>(
            server.deps.db,
            sql`select count(*) as n from outbound_events where org_key = ${owner.orgKey}
                and type = 'member_budget.exhausted' and data->>'user_id' = ${user.userId}`,
          )
        )[0]!.n,
      );
    await waitUntil(async () => (await exhaustedEvents()) > 0, 10_000);
    expect((await callChat(server.url, key)).code).toBe('member_budget_exhausted');
    // A refusal notes the exhaustion off the call's path; the same note, awaited here, is what every
    // later refusal of the period runs: it finds the period marked and emits nothing.
    await noteBudgetExhausted(server.deps.db, {
      orgKey: owner.orgKey,
      userId: user.userId,
      apiTokenId: tokenId,
      least: 20,
    });
    expect(await exhaustedEvents()).toBe(1);
    // The owner, who has no budget, still spends.
    expect((await callChat(server.url, suite.key)).status).toBe(200);
    // The member sees what the ledger says.
    expect((await readBudget(user.session)).budget).toMatchObject({
      spent_credits: spent,
      budget_credits: 100,
    });
  });

  it('resets at the period boundary (the period row aged, no sleeping), and a raised budget applies at once', async () => {
    const { user, key } = await newMember();
    await putMemberBudget(user.userId, { period: 'day', budget_credits: 50 });
    const first = await callUntilRefused(key);
    expect(first.refusal.code).toBe('member_budget_exhausted');
    // Yesterday: this period's row now belongs to the one before, so the next call starts a new period.
    await server.deps.db.execute(sql`
      update member_budget_usage set period_start = period_start - interval '1 day'
      where budget_id in (select id from member_budgets where user_id = ${user.userId})`);
    expect((await readBudget(user.session)).budget).toMatchObject({ spent_credits: 0 });
    const second = await callUntilRefused(key);
    expect(second.answered).toBe(first.answered);
    expect(second.refusal.code).toBe('member_budget_exhausted');
    // Raising the budget: the period's use stays, the room grows.
    await putMemberBudget(user.userId, { period: 'day', budget_credits: 200 });
    expect((await callChat(server.url, key)).status).toBe(200);
  });

  it('a token budget limits the calls made with that token, on top of the member budget', async () => {
    const { user, key, tokenId } = await newMember();
    const res = await client(server.url).put(
      `/v1/clients/${owner.clientId}/tokens/${tokenId}/budget`,
      { period: 'week', budget_credits: 40 },
      { token: owner.session },
    );
    expect(res.status).toBe(200);
    expect(readJson(budget, res.body)).toMatchObject({
      token_id: tokenId,
      user_id: user.userId,
      period: 'week',
    });
    const { answered, refusal } = await callUntilRefused(key);
    expect(refusal).toMatchObject({ status: 402, code: 'member_budget_exhausted' });
    expect(20 * answered).toBeLessThanOrEqual(40);
    expect((await readBudget(user.session)).token_budgets).toHaveLength(1);
    // A new token of the member (the old one revoked by the mint) inherits the budget and its use
    // (CONTRACT §9): minting a replacement is no way around it, and the owner's list shows the live token.
    const spentBefore = (await readBudget(user.session)).token_budgets[0]!.spent_credits;
    const fresh = await createApiToken(server, user, owner.orgKey);
    expect(await callChat(server.url, fresh.secret)).toMatchObject({
      status: 402,
      code: 'member_budget_exhausted',
    });
    const carried = (await readBudget(user.session)).token_budgets;
    expect(carried).toHaveLength(1);
    expect(carried[0]).toMatchObject({ token_id: fresh.id, budget_credits: 40, spent_credits: spentBefore });
    const list = await client(server.url).get(`/v1/clients/${owner.clientId}/budgets`, {
      token: owner.session,
    });
    const tokenIds = readJson(z.object({ data: z.array(budget) }), list.body)
      .data.filter((b) => b.user_id === user.userId && b.token_id !== null)
      .map((b) => b.token_id);
    expect(tokenIds).toEqual([fresh.id]);
    // Revoked by the member first, then minted: still the same credential's budget.
    const revoked = await client(server.url).post(
      '/v1/tokens/revoke',
      { id: fresh.id },
      { token: user.session },
    );
    expect(revoked.status).toBe(200);
    const again = await createApiToken(server, user, owner.orgKey);
    expect(await callChat(server.url, again.secret)).toMatchObject({
      status: 402,
      code: 'member_budget_exhausted',
    });
    expect((await readBudget(user.session)).token_budgets.map((b) => b.token_id)).toEqual([again.id]);
    // A device login rotates the credential: the budget follows it too.
    const api = client(server.url);
    const code = readJson(deviceCode, (await api.post('/v1/auth/device/code')).body);
    expect(
      (
        await api.post(
          '/v1/auth/device/authorize',
          { user_code: code.user_code, client_id: owner.clientId },
          { token: user.session },
        )
      ).status,
    ).toBe(200);
    const login = readJson(
      z.object({ status: z.literal('complete'), token: z.string() }),
      (await api.post('/v1/auth/device/poll', { device_code: code.device_code })).body,
    );
    expect(await callChat(server.url, login.token)).toMatchObject({
      status: 402,
      code: 'member_budget_exhausted',
    });
    const afterLogin = (await readBudget(user.session)).token_budgets;
    expect(afterLogin).toHaveLength(1);
    expect(afterLogin[0]!.token_id).not.toBe(again.id);
    // The ledger: the member's token calls never debited more than the one budget, across three credentials.
    expect(-(await memberDebits(user.userId))).toBeLessThanOrEqual(40);
    // Another org's token, or an unknown one: 404.
    const other = await createUser(server);
    const otherToken = await createApiToken(server, other, other.orgKey);
    const foreign = await client(server.url).put(
      `/v1/clients/${owner.clientId}/tokens/${otherToken.id}/budget`,
      { period: 'week', budget_credits: 40 },
      { token: owner.session },
    );
    expect(foreign.status).toBe(404);
  });

  it('50 concurrent calls against a small budget: spent ≤ budget, the rest 402, the ledger clean', async () => {
    await setOrgBalance(server, owner.orgKey, 100_000);
    const { user, key } = await newMember();
    const BUDGET = 150;
    await putMemberBudget(user.userId, { period: 'day', budget_credits: BUDGET });
    const results = await Promise.all(
      Array.from({ length: 50 }, (_, i) => callChat(server.url, key, { stream: i % 2 === 0 })),
    );
    const ok = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status !== 200);
    expect(ok.length).toBeGreaterThan(0);
    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) expect(r).toMatchObject({ status: 402, code: 'member_budget_exhausted' });
    const spent = await memberDebits(user.userId);
    expect(spent).toBeLessThanOrEqual(BUDGET);
    const mine = await readBudget(user.session);
    expect(mine.budget!.spent_credits).toBe(spent);
    const [open] = await queryRows<{ n: unknown }>(
      server.deps.db,
      sql`select count(*) as n from billing_holds where user_id = ${user.userId} and status = 'held'`,
    );
    expect(Number(open!.n)).toBe(0);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('an org with budgets takes no hold ahead for its next call (adopting one would skip the budget)', async () => {
    const { user, key } = await newMember();
    await putMemberBudget(user.userId, { period: 'day', budget_credits: 10_000 });
    const [before] = await queryRows<{ t: unknown }>(server.deps.db, sql`select now() as t`);
    for (let i = 0; i < 5; i++) expect((await callChat(server.url, key)).status).toBe(200);
    const [spares] = await queryRows<{ n: unknown }>(
      server.deps.db,
      sql`select count(*) as n from billing_holds where org_key = ${owner.orgKey} and user_id is null
          and created_at >= ${before!.t as string}::timestamptz`,
    );
    expect(Number(spares!.n)).toBe(0);
  });
});
