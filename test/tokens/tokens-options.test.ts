import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { eq } from 'drizzle-orm';
import { usageRecords } from '../../src/db/schema.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { eventually } from '../helpers/eventually.js';
import { TEST_PRICES } from '../helpers/fake-upstream.js';
import { detailOf, openAiErrorOf, rejectionOf } from '../helpers/json.js';
import type { MintedToken, Page, TokenRow, Verified } from '../helpers/answers.js';

// Credential options (CONTRACT §6): expires_at and scopes on every mint, expiry = revocation on every
// route, 403 insufficient_scope outside the scopes, last_used_at kept to the minute, and the status a
// credential reads of itself at GET /v1/auth/verify (principal, scopes, expiry, last use, spend, budget).

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  // Priced (fake-upstream.ts TEST_PRICES) so that the built-in model's calls debit something.
  server = await startTestServer({ env: TEST_PRICES });
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

const now = () => Math.floor(Date.now() / 1000);
const mint = (user: TestUser, body: Record<string, unknown> = {}) =>
  api.post<MintedToken>('/v1/tokens', body, { token: user.session });
const verify = (secret: string) => api.get<Verified>('/v1/auth/verify', { token: secret });
const sdk = (apiKey: string) =>
  new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 10_000 });
const chat = (secret: string) =>
  sdk(secret).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hello' }] });
type ApiError = InstanceType<typeof OpenAI.APIError>;

describe('validation of the options (400 VALIDATION_ERROR naming the field)', () => {
  it.each([
    [{ expires_at: 1 }, 'expires_at'],
    [{ expires_at: 'tomorrow' }, 'expires_at'],
    [{ expires_at: 'NOW' }, 'expires_at'],
    [{ scopes: [] }, 'scopes'],
    [{ scopes: ['admin'] }, 'scopes.0'],
    [{ scopes: ['model', 'model'] }, 'scopes'],
    [{ scopes: 'model' }, 'scopes'],
  ])('%o', async (body, path) => {
    const user = await createUser(server);
    const res = await mint(user, body);
    expect(res.status).toBe(400);
    expect(detailOf(res.body)).toMatchObject({ code: 'VALIDATION_ERROR', errors: [{ path }] });
  });

  it('expires_at must be at most 400 days away; 400 days exactly is accepted', async () => {
    const user = await createUser(server);
    const far = await mint(user, { expires_at: now() + 400 * 86_400 + 120 });
    expect(far.status).toBe(400);
    const ok = await mint(user, { expires_at: now() + 400 * 86_400 - 60 });
    expect(ok.status).toBe(200);
  });
});

describe('scopes', () => {
  it('a model-only credential calls the model routes and verify, and gets 403 insufficient_scope elsewhere', async () => {
    const user = await createUser(server);
    const minted = await mint(user, { scopes: ['model'] });
    expect(minted.status).toBe(200);
    expect(minted.body).toMatchObject({ scopes: ['model'], expires_at: null });
    expect((await chat(minted.body.token)).choices.length).toBe(1);
    expect((await verify(minted.body.token)).body.scopes).toEqual(['model']);
    const clients = await api.get('/v1/clients', { token: minted.body.token });
    expect(clients.status).toBe(403);
    expect(detailOf(clients.body).code).toBe('insufficient_scope');
    expect(clients.headers.get('www-authenticate')).toBe(
      'Bearer error="insufficient_scope", scope="account"',
    );
  });

  it('an account-only credential reads the account routes and gets 403 insufficient_scope on every model route', async () => {
    const user = await createUser(server);
    const minted = await mint(user, { scopes: ['account'] });
    expect((await api.get('/v1/clients', { token: minted.body.token })).status).toBe(200);
    for (const path of ['/v1/models', '/v1/agents']) {
      const res = await api.get(path, { token: minted.body.token });
      expect(res.status, path).toBe(403);
      expect(openAiErrorOf(res.body).code).toBe('insufficient_scope');
    }
    // Twice: the second call of a token takes the one-statement admission when the first was admitted.
    for (let i = 0; i < 2; i++) {
      const err = await rejectionOf<ApiError>(chat(minted.body.token));
      expect(err.status).toBe(403);
      expect(err.code).toBe('insufficient_scope');
    }
    expect((await verify(minted.body.token)).status).toBe(200);
  });
});

describe('expiry', () => {
  it('a credential past its expires_at is 401 invalid token on every route, the chat call’s short way included', async () => {
    const user = await createUser(server);
    const expiresAt = now() + 3;
    const minted = await mint(user, { expires_at: expiresAt });
    expect(minted.body.expires_at).toBe(expiresAt);
    // Two calls while it lives: the second is admitted in one statement (the token is known).
    expect((await chat(minted.body.token)).choices.length).toBe(1);
    expect((await chat(minted.body.token)).choices.length).toBe(1);
    expect((await verify(minted.body.token)).body.expires_at).toBe(minted.body.expires_at);
    await eventually(async () => (await verify(minted.body.token)).status === 401, 10_000);
    const v = await verify(minted.body.token);
    expect(detailOf(v.body)).toEqual({ code: 'INVALID_TOKEN', message: 'invalid token' });
    expect((await api.get('/v1/clients', { token: minted.body.token })).status).toBe(401);
    expect((await api.get('/v1/models', { token: minted.body.token })).status).toBe(401);
    const err = await rejectionOf<ApiError>(chat(minted.body.token));
    expect(err.status).toBe(401);
    const list = await api.get<Page<TokenRow>>('/v1/tokens', { token: user.session });
    expect(list.body.data[0]).toMatchObject({ id: minted.body.id, expires_at: minted.body.expires_at });
  });
});

describe('GET /v1/auth/verify and last_used_at', () => {
  it('reports the principal, scopes, expiry, last use, what the credential spent and its budget', async () => {
    const user = await createUser(server);
    const expiresAt = now() + 86_400;
    const minted = await mint(user, { expires_at: expiresAt, token_name: 'ci' });
    const before = await verify(minted.body.token);
    expect(before.body).toMatchObject({
      valid: true,
      user_id: user.userId,
      email: user.email,
      token_id: minted.body.id,
      token_name: 'ci',
      principal: { type: 'user', id: user.userId },
      scopes: ['model', 'account'],
      expires_at: expiresAt,
      spend: { today: 0, week: 0, month: 0 },
      budget: null,
    });
    const put = await api.put(
      `/v1/clients/${user.clientId}/tokens/${minted.body.id}/budget`,
      { period: 'week', budget_credits: 100_000 },
      { token: user.session },
    );
    expect(put.status).toBe(200);
    await chat(minted.body.token);
    await chat(minted.body.token);
    // The answer goes out before its settle: wait for both calls' usage records.
    const settled = async () =>
      (await server.deps.db.select().from(usageRecords).where(eq(usageRecords.apiTokenId, minted.body.id)))
        .length;
    await eventually(async () => (await settled()) === 2);
    const after = await verify(minted.body.token);
    const spent = after.body.spend.today;
    expect(spent).toBeGreaterThan(0);
    expect(after.body.spend).toEqual({ today: spent, week: spent, month: spent });
    expect(after.body.budget).toEqual({
      budget_credits: 100_000,
      period: 'week',
      spent_credits: spent,
      remaining_credits: 100_000 - spent,
    });
    // Its use is recorded, kept to the minute: set by the first use and not moved by the next ones.
    await eventually(async () => (await verify(minted.body.token)).body.last_used_at !== null);
    const first = (await verify(minted.body.token)).body.last_used_at!;
    expect(first).toBeGreaterThanOrEqual(minted.body.created_at);
    await chat(minted.body.token);
    const list = await api.get<Page<TokenRow>>('/v1/tokens', { token: user.session });
    expect(list.body.data[0]).toMatchObject({
      id: minted.body.id,
      last_used_at: first,
      scopes: ['model', 'account'],
    });
  });
});
