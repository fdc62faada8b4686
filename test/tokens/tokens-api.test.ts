import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq, isNull } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { assertAuthChecks } from '../helpers/auth-checks.js';
import { apiTokens, memberships } from '../../src/db/schema.js';
import { anyOf, containing, detailOf, matching } from '../helpers/json.js';
import type { MintedToken, Page, TokenRow, Verified } from '../helpers/answers.js';
import { eventuallyValue } from '../helpers/eventually.js';

// API tokens and /v1/auth/verify (interface document: Tokens, API token, States; CONTRACT §6).

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

const mint = (user: TestUser, body: Record<string, unknown> = {}) =>
  api.post<MintedToken>('/v1/tokens', body, { token: user.session });
const verify = (secret: string) => api.get<Verified>('/v1/auth/verify', { token: secret });

describe('auth checks on every token route', () => {
  it.each([
    [{ method: 'POST', path: '/v1/tokens', body: {} }, 'session'],
    [{ method: 'GET', path: '/v1/tokens' }, 'session'],
    [{ method: 'POST', path: '/v1/tokens/revoke', body: { id: 1 } }, 'session'],
    [{ method: 'GET', path: '/v1/auth/verify' }, 'token'],
  ] as const)('%o', async (route, accepts) => {
    await assertAuthChecks(server, route, { accepts });
  });
});

describe('POST /v1/tokens', () => {
  it('mints for the default org with the default name; the secret works at once and is stored as an HMAC only', async () => {
    const user = await createUser(server);
    const res = await mint(user);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: anyOf(Number),
      client_id: user.orgId,
      token_name: 'API key',
      token: matching(/^svc_[A-Za-z0-9_-]{43}$/),
      created_at: anyOf(Number),
      expires_at: null,
      scopes: ['model', 'account'],
    });
    expect(res.headers.get('cache-control')).toBe('no-store');
    const v = await verify(res.body.token);
    expect(v.status).toBe(200);
    expect(v.body).toEqual({
      valid: true,
      client_id: user.orgId,
      user_id: user.userId,
      email: user.email,
      token_id: res.body.id,
      token_name: 'API key',
      principal: { type: 'user', id: user.userId },
      scopes: ['model', 'account'],
      expires_at: null,
      // This very request is a use, stamped off its path: it may or may not show yet.
      last_used_at: v.body.last_used_at,
      spend: { today: 0, week: 0, month: 0 },
      budget: null,
    });
    expect([null, res.body.created_at, res.body.created_at + 1]).toContain(v.body.last_used_at);
    const rows = await server.deps.db.select().from(apiTokens).where(eq(apiTokens.id, res.body.id));
    expect(JSON.stringify(rows)).not.toContain(res.body.token.slice(4));
  });

  it('accepts the session cookie from the same origin (the portal’s way), with Origin or Sec-Fetch-Site', async () => {
    const user = await createUser(server);
    const cookie = `__Host-svc_session=${user.session}`;
    expect(
      (await api.post<MintedToken>('/v1/tokens', {}, { cookie, headers: { origin: server.url } })).status,
    ).toBe(200);
    expect(
      (
        await api.post<MintedToken>(
          '/v1/tokens',
          {},
          { cookie, headers: { 'sec-fetch-site': 'same-origin' } },
        )
      ).status,
    ).toBe(200);
  });

  it('mints for an org the user belongs to, in either spelling, as member or viewer', async () => {
    const owner = await createUser(server);
    const member = await createUser(server);
    const viewer = await createUser(server);
    await addMember(server, owner.orgKey, member.userId, 'member');
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');
    const a = await mint(member, { client_id: owner.clientId, token_name: 'ci' });
    expect(a.body).toMatchObject({ client_id: owner.orgId, token_name: 'ci' });
    const b = await mint(viewer, { client_id: owner.orgId });
    expect(b.status).toBe(200);
    expect((await verify(b.body.token)).body.client_id).toBe(owner.orgId);
  });

  it('refuses an org the user does not belong to (403), an e-mail or garbage (400), a bad name (400)', async () => {
    const user = await createUser(server);
    const stranger = await createUser(server);
    const foreign = await mint(user, { client_id: stranger.clientId });
    expect(foreign.status).toBe(403);
    expect(detailOf(foreign.body).code).toBe('NO_ACCESS');
    for (const body of [
      { client_id: stranger.email },
      { client_id: 'org_' },
      { client_id: 42 },
      { token_name: '' },
      { token_name: 'x'.repeat(101) },
    ]) {
      const res = await mint(user, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
    }
    expect(
      await server.deps.db.select().from(apiTokens).where(eq(apiTokens.userId, user.userId)),
    ).toHaveLength(0);
  });

  it('a new mint revokes the previous credential of that (org, user): the old one is 401 on the next request', async () => {
    const user = await createUser(server);
    const first = (await mint(user)).body;
    const second = (await mint(user)).body;
    const old = await verify(first.token);
    expect(old.status).toBe(401);
    expect(detailOf(old.body).code).toBe('INVALID_TOKEN');
    expect((await verify(second.token)).status).toBe(200);
  });

  it('two racing mints leave exactly one active credential (partial unique index)', async () => {
    const user = await createUser(server);
    const results = await Promise.all(Array.from({ length: 5 }, () => mint(user)));
    expect(results.every((r) => r.status === 200)).toBe(true);
    const active = await server.deps.db
      .select()
      .from(apiTokens)
      .where(
        and(eq(apiTokens.userId, user.userId), eq(apiTokens.orgId, user.orgKey), isNull(apiTokens.revokedAt)),
      );
    expect(active).toHaveLength(1);
    const working = await Promise.all(results.map((r) => verify(r.body.token)));
    expect(working.filter((r) => r.status === 200)).toHaveLength(1);
  });
});

describe('one active credential per (org, user)', () => {
  it('is enforced by the database itself: a second active row for the pair is refused (partial unique index)', async () => {
    const user = await createUser(server);
    await createApiToken(server, user, user.orgKey);
    const insert = server.deps.db.insert(apiTokens).values({
      userId: user.userId,
      orgId: user.orgKey,
      tokenName: 'sneaky',
      tokenHash: 'h-' + user.userId,
      tokenPrefix: 'svc_xxxx',
    });
    await expect(insert).rejects.toMatchObject({ cause: containing({ code: '23505' }) });
  });
});

describe('GET /v1/tokens', () => {
  it('lists own tokens only, metadata only, active first', async () => {
    const owner = await createUser(server);
    const mate = await createUser(server);
    await addMember(server, owner.orgKey, mate.userId);
    const mateToken = await createApiToken(server, mate, owner.orgKey);
    const first = (await mint(owner, { token_name: 'one' })).body;
    const second = (await mint(owner, { token_name: 'two' })).body;
    const res = await api.get<Page<TokenRow>>('/v1/tokens', { token: owner.session });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual([
      {
        id: second.id,
        client_id: owner.orgId,
        token_name: 'two',
        token_prefix: second.token.slice(0, 8),
        created_at: anyOf(Number),
        last_used_at: null,
        revoked_at: null,
        expires_at: null,
        scopes: ['model', 'account'],
      },
      containing({ id: first.id, token_name: 'one', revoked_at: anyOf(Number) }),
    ]);
    expect(JSON.stringify(res.body)).not.toContain(second.token);
    expect(res.body.data.map((t: { id: number }) => t.id)).not.toContain(mateToken.id);
  });

  it('shows last_used_at once the token has been used', async () => {
    const user = await createUser(server);
    const minted = (await mint(user)).body;
    expect((await verify(minted.token)).status).toBe(200);
    // The use is recorded off the request path (at most once a minute per token): wait for it, bounded.
    const item = await eventuallyValue(
      async () => (await api.get<Page<TokenRow>>('/v1/tokens', { token: user.session })).body.data[0],
      (row) => !!row?.last_used_at,
      15_000,
      "the token's last_used_at",
    );
    expect(item?.last_used_at).toBeGreaterThanOrEqual(minted.created_at);
  });

  it('pages with limit and offset and refuses values outside the contract (400)', async () => {
    const user = await createUser(server);
    await mint(user);
    await mint(user);
    expect(
      (await api.get<Page<TokenRow>>('/v1/tokens', { token: user.session, query: { limit: 1 } })).body.data,
    ).toHaveLength(1);
    expect(
      (await api.get<Page<TokenRow>>('/v1/tokens', { token: user.session, query: { limit: 1, offset: 1 } }))
        .body.data,
    ).toHaveLength(1);
    for (const query of [
      { limit: 0 },
      { limit: 101 },
      { offset: -1 },
      { limit: 'x' },
      { limit: '1e1' },
      { offset: '' },
    ] as Record<string, string | number>[]) {
      expect((await api.get<Page<TokenRow>>('/v1/tokens', { token: user.session, query })).status).toBe(400);
    }
  });
});

describe('POST /v1/tokens/revoke', () => {
  it('revokes an own token; it is rejected with 401 on the very next request; revoking again keeps revoked_at', async () => {
    const user = await createUser(server);
    const minted = (await mint(user)).body;
    expect((await verify(minted.token)).status).toBe(200);
    const res = await api.post('/v1/tokens/revoke', { id: minted.id }, { token: user.session });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ id: minted.id, revoked_at: anyOf(Number) });
    expect((await verify(minted.token)).status).toBe(401);
    const again = await api.post('/v1/tokens/revoke', { id: minted.id }, { token: user.session });
    expect(again.body).toEqual(res.body);
  });

  it('400 without an id, 404 for an unknown id and for a teammate’s token (which stays active)', async () => {
    const owner = await createUser(server);
    const mate = await createUser(server);
    await addMember(server, owner.orgKey, mate.userId);
    const mateToken = await createApiToken(server, mate, owner.orgKey);
    for (const body of [{}, { id: 'one' }, { id: -1 }]) {
      const res = await api.post('/v1/tokens/revoke', body, { token: owner.session });
      expect(res.status).toBe(400);
      expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
    }
    for (const id of [2_000_000_000, mateToken.id]) {
      const res = await api.post('/v1/tokens/revoke', { id }, { token: owner.session });
      expect(res.status).toBe(404);
      expect(detailOf(res.body).code).toBe('NOT_FOUND');
    }
    expect((await verify(mateToken.secret)).status).toBe(200);
  });
});

describe('GET /v1/auth/verify membership revalidation (Authentication 5)', () => {
  it('403 NOT_A_MEMBER for a credential whose user no longer belongs to its org', async () => {
    const owner = await createUser(server);
    const user = await createUser(server);
    await addMember(server, owner.orgKey, user.userId);
    const { secret } = await createApiToken(server, user, owner.orgKey);
    expect((await verify(secret)).status).toBe(200);
    // The membership disappears without the token being revoked (removal revokes too; see orgs tests).
    await server.deps.db
      .delete(memberships)
      .where(and(eq(memberships.orgId, owner.orgKey), eq(memberships.userId, user.userId)));
    const res = await verify(secret);
    expect(res.status).toBe(403);
    expect(detailOf(res.body).code).toBe('NOT_A_MEMBER');
  });
});
