import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { and, eq, isNull } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createUser, STRONG_PASSWORD, type TestUser } from '../helpers/fixtures.js';
import { assertAuthChecks } from '../helpers/auth-checks.js';
import { TEST_PRICES } from '../helpers/fake-upstream.js';
import { eventually } from '../helpers/webhook-receiver.js';
import { anyOf, detailOf, matching, rejectionOf } from '../helpers/json.js';
import type { MintedToken, Verified } from '../helpers/answers.js';
import { apiTokens, usageRecords } from '../../src/db/schema.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';

// Service accounts (CONTRACT §11): owner-only routes, the shapes, one active credential per
// (organization, principal), billing to the organization, never a sign-in.

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  server = await startTestServer({ env: TEST_PRICES });
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

interface ServiceAccount {
  id: string;
  name: string;
  role: string;
  created_at: number;
  credential?: {
    token_id: number;
    token_prefix: string;
    expires_at: number | null;
    scopes: string[];
    last_used_at: number | null;
  } | null;
}

const base = (owner: TestUser) => `/v1/clients/${owner.clientId}/service-accounts`;
const create = (owner: TestUser, body: Record<string, unknown>, token = owner.session) =>
  api.post<ServiceAccount>(base(owner), body, { token });
const list = (owner: TestUser) => api.get<{ data: ServiceAccount[] }>(base(owner), { token: owner.session });
const mintFor = (owner: TestUser, saId: string, body: Record<string, unknown> = {}) =>
  api.post<MintedToken>(`${base(owner)}/${saId}/tokens`, body, { token: owner.session });
const verify = (secret: string) => api.get<Verified>('/v1/auth/verify', { token: secret });
const chat = (secret: string) =>
  new OpenAI({
    apiKey: secret,
    baseURL: `${server.url}/v1`,
    maxRetries: 0,
    timeout: 10_000,
  }).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hello' }] });

describe('auth checks', () => {
  it.each([
    { method: 'POST', path: '/v1/clients/client_x/service-accounts', body: { name: 'ci' } },
    { method: 'GET', path: '/v1/clients/client_x/service-accounts' },
    { method: 'DELETE', path: '/v1/clients/client_x/service-accounts/sa_x' },
    { method: 'POST', path: '/v1/clients/client_x/service-accounts/sa_x/tokens', body: {} },
  ] as const)('%o', async (route) => {
    await assertAuthChecks(server, route, { accepts: 'both' });
  });

  it('only the owner manages them: a member and a viewer get 403 NO_ACCESS, another client 403', async () => {
    const owner = await createUser(server);
    const mate = await createUser(server);
    const viewer = await createUser(server);
    await addMember(server, owner.orgKey, mate.userId, 'member');
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');
    const sa = (await create(owner, { name: 'ci' })).body;
    for (const u of [mate, viewer]) {
      expect(detailOf((await create(owner, { name: 'x' }, u.session)).body).code).toBe('NO_ACCESS');
      expect((await api.get(base(owner), { token: u.session })).status).toBe(403);
      expect((await api.post(`${base(owner)}/${sa.id}/tokens`, {}, { token: u.session })).status).toBe(403);
      expect((await api.delete(`${base(owner)}/${sa.id}`, { token: u.session })).status).toBe(403);
    }
    const stranger = await createUser(server);
    expect((await api.get(base(owner), { token: stranger.session })).status).toBe(403);
    // The owner's own svc_ credential works (S or the owner's B).
    const ownerKey = await api.post<MintedToken>('/v1/tokens', {}, { token: owner.session });
    expect((await api.get(base(owner), { token: ownerKey.body.token })).status).toBe(200);
  });
});

describe('the shapes and the credential', () => {
  it('create, list, mint, replace, delete', async () => {
    const owner = await createUser(server);
    const created = await create(owner, { name: 'nightly build' });
    expect(created.status).toBe(200);
    expect(created.body).toEqual({
      id: matching(/^sa_[a-z0-9]{26}$/),
      name: 'nightly build',
      role: 'member',
      created_at: anyOf(Number),
    });
    const sa = created.body;
    expect((await list(owner)).body).toEqual({ data: [{ ...sa, credential: null }] });

    const expiresAt = Math.floor(Date.now() / 1000) + 86_400;
    const first = await mintFor(owner, sa.id, { token_name: 'ci', expires_at: expiresAt, scopes: ['model'] });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({
      id: anyOf(Number),
      client_id: owner.orgId,
      token_name: 'ci',
      token: matching(/^svc_[A-Za-z0-9_-]{43}$/),
      created_at: anyOf(Number),
      expires_at: expiresAt,
      scopes: ['model'],
    });
    expect(first.headers.get('cache-control')).toBe('no-store');
    const v = await verify(first.body.token);
    expect(v.body).toMatchObject({
      valid: true,
      client_id: owner.orgId,
      user_id: null,
      email: null,
      token_id: first.body.id,
      principal: { type: 'service_account', id: sa.id },
      scopes: ['model'],
      expires_at: expiresAt,
    });
    expect((await list(owner)).body.data[0]!.credential).toEqual({
      token_id: first.body.id,
      token_prefix: first.body.token.slice(0, 8),
      expires_at: expiresAt,
      scopes: ['model'],
      last_used_at: v.body.last_used_at,
    });

    // A new mint revokes the previous credential in the same transaction: one active per principal.
    const second = await mintFor(owner, sa.id);
    expect(second.body).toMatchObject({
      token_name: 'Service account key',
      expires_at: null,
      scopes: ['model', 'account'],
    });
    expect((await verify(first.body.token)).status).toBe(401);
    expect((await verify(second.body.token)).status).toBe(200);
    const active = await server.deps.db
      .select()
      .from(apiTokens)
      .where(and(eq(apiTokens.userId, sa.id), isNull(apiTokens.revokedAt)));
    expect(active.map((t) => t.id)).toEqual([second.body.id]);

    const del = await api.delete(`${base(owner)}/${sa.id}`, { token: owner.session });
    expect(del.status).toBe(200);
    expect(del.body).toEqual({ deleted: true });
    expect((await verify(second.body.token)).status).toBe(401);
    expect((await list(owner)).body).toEqual({ data: [] });
    expect((await api.delete(`${base(owner)}/${sa.id}`, { token: owner.session })).status).toBe(404);
    expect((await mintFor(owner, sa.id)).status).toBe(404);
  });

  it('400 for a bad body, 404 for an unknown id or one of another client', async () => {
    const owner = await createUser(server);
    const other = await createUser(server);
    for (const body of [{}, { name: '' }, { name: 'x', role: 'owner' }]) {
      const res = await create(owner, body);
      expect(res.status).toBe(400);
      expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
    }
    const theirs = (await create(other, { name: 'theirs' })).body;
    expect((await mintFor(owner, theirs.id)).status).toBe(404);
    expect((await mintFor(owner, 'sa_nope')).status).toBe(404);
    expect((await mintFor(owner, 'garbage')).status).toBe(404);
    expect((await api.delete(`${base(owner)}/${theirs.id}`, { token: owner.session })).status).toBe(404);
    const sa = (await create(owner, { name: 'ci' })).body;
    expect((await mintFor(owner, sa.id, { scopes: [] })).status).toBe(400);
    expect((await mintFor(owner, sa.id, { expires_at: 5 })).status).toBe(400);
  });
});

describe('what a service account is', () => {
  it('bills its organization, records itself as the caller, and a viewer one cannot spend', async () => {
    const owner = await createUser(server);
    const sa = (await create(owner, { name: 'bot' })).body;
    const key = (await mintFor(owner, sa.id)).body;
    const before = await orgBalanceCredits(server.deps.db, owner.orgKey);
    expect((await chat(key.token)).choices.length).toBe(1);
    await eventually(
      async () =>
        (await server.deps.db.select().from(usageRecords).where(eq(usageRecords.apiTokenId, key.id)))
          .length === 1,
    );
    const [usage] = await server.deps.db
      .select()
      .from(usageRecords)
      .where(eq(usageRecords.apiTokenId, key.id));
    expect(usage).toMatchObject({ orgKey: owner.orgKey, userId: sa.id });
    expect(await orgBalanceCredits(server.deps.db, owner.orgKey)).toBe(before - usage!.creditsDebited);
    expect((await verify(key.token)).body.spend.today).toBe(usage!.creditsDebited);

    const watcher = (await create(owner, { name: 'watcher', role: 'viewer' })).body;
    const watcherKey = (await mintFor(owner, watcher.id)).body;
    expect((await api.get('/v1/models', { token: watcherKey.token })).status).toBe(200);
    const err = await rejectionOf<InstanceType<typeof OpenAI.APIError>>(chat(watcherKey.token));
    expect(err.status).toBe(403);
    expect(err.code).toBe('viewer_cannot_spend');
  });

  it('never signs in, is no member in the member list, and cannot be added or reset by its address', async () => {
    const owner = await createUser(server);
    const sa = (await create(owner, { name: 'bot' })).body;
    const email = `${sa.id}@service-account.invalid`;
    const login = await api.post('/v1/login', { email, password: STRONG_PASSWORD });
    expect(login.status).toBe(401);
    expect(detailOf(login.body).code).toBe('INVALID_CREDENTIALS');
    const members = await api.get<{ data: { user_id: string }[] }>(`/v1/clients/${owner.clientId}/members`, {
      token: owner.session,
    });
    expect(members.body.data.map((m) => m.user_id)).toEqual([owner.userId]);
    const other = await createUser(server);
    const add = await api.post(`/v1/clients/${other.clientId}/members`, { email }, { token: other.session });
    expect(add.status).toBe(404);
    expect(detailOf(add.body).code).toBe('USER_NOT_FOUND');
    expect((await api.post('/v1/password/reset/request', { email })).status).toBe(200);
    const mail = await api.get<{ data: unknown[] }>('/dev/mail', { query: { to: email } });
    expect(mail.body.data).toEqual([]);
  });
});
