import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { assertAuthChecks } from '../helpers/auth-checks.js';
import { orgs } from '../../src/db/schema.js';
import { anyOf, detailOf, matching } from '../helpers/json.js';
import type { ClientRow, CreatedClient, MemberRow, Page, Verified } from '../helpers/answers.js';

// Clients (interface document: Clients, Client; CONTRACT §2, §5).

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

const createClient = async (user: TestUser, name = 'Side project') =>
  (await api.post<CreatedClient>('/v1/clients', { name }, { token: user.session })).body;
const verify = (secret: string) => api.get<Verified>('/v1/auth/verify', { token: secret });

describe('auth checks on the client routes', () => {
  it.each([
    { method: 'GET', path: '/v1/clients' },
    { method: 'POST', path: '/v1/clients', body: { name: 'x' } },
    { method: 'DELETE', path: '/v1/clients/client_abcdefgh' },
  ] as const)('%o', async (route) => {
    await assertAuthChecks(server, route);
  });
});

describe('GET /v1/clients', () => {
  it('lists live memberships with the caller’s role, default client first, for a session and for an svc_ token', async () => {
    const owner = await createUser(server, { name: 'Owner' });
    const user = await createUser(server, { name: 'Ann' });
    await addMember(server, owner.orgKey, user.userId, 'viewer');
    const expected = [
      {
        id: user.clientId,
        name: "Ann's personal organization",
        role: 'owner',
        created_at: anyOf(Number),
      },
      {
        id: owner.clientId,
        name: "Owner's personal organization",
        role: 'viewer',
        created_at: anyOf(Number),
      },
    ];
    const res = await api.get<Page<ClientRow>>('/v1/clients', { token: user.session });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ data: expected });
    const { secret } = await createApiToken(server, user, user.orgKey);
    expect((await api.get<Page<ClientRow>>('/v1/clients', { token: secret })).body).toEqual({
      data: expected,
    });
  });

  it('pages by limit and offset (CONTRACT §3), in the same order; a limit or offset outside the rule is 400', async () => {
    const user = await createUser(server);
    const made = [];
    for (const name of ['B', 'C', 'D'])
      made.push((await api.post<CreatedClient>('/v1/clients', { name }, { token: user.session })).body.id);
    const all = (await api.get<Page<ClientRow>>('/v1/clients', { token: user.session })).body.data.map(
      (c: { id: string }) => c.id,
    );
    expect(all).toEqual([user.clientId, ...made]);
    const page = (q: string) => api.get<Page<ClientRow>>(`/v1/clients?${q}`, { token: user.session });
    expect((await page('limit=2')).body.data.map((c: { id: string }) => c.id)).toEqual(all.slice(0, 2));
    expect((await page('limit=2&offset=2')).body.data.map((c: { id: string }) => c.id)).toEqual(
      all.slice(2, 4),
    );
    expect((await page('offset=9')).body.data).toEqual([]);
    for (const q of ['limit=0', 'limit=101', 'offset=-1', 'limit=abc']) {
      const res = await page(q);
      expect(res.status, q).toBe(400);
      expect(detailOf(res.body).code, q).toBe('VALIDATION_ERROR');
    }
  });
});

describe('POST /v1/clients', () => {
  it('creates a client owned by the caller (owner_id from the credential, never the body)', async () => {
    const user = await createUser(server);
    const other = await createUser(server);
    const res = await api.post<CreatedClient>(
      '/v1/clients',
      { name: '  Acme  ', owner_id: other.userId },
      { token: user.session },
    );
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: matching(/^client_[a-z0-9]+$/),
      name: 'Acme',
      owner_id: user.userId,
      created_at: anyOf(Number),
    });
    const list = (await api.get<Page<ClientRow>>('/v1/clients', { token: user.session })).body.data;
    expect(list).toContainEqual({
      id: res.body.id,
      name: 'Acme',
      role: 'owner',
      created_at: res.body.created_at,
    });
  });

  it('works with an svc_ token and refuses a missing or empty name (400)', async () => {
    const user = await createUser(server);
    const { secret } = await createApiToken(server, user, user.orgKey);
    expect(
      (await api.post<CreatedClient>('/v1/clients', { name: 'From CLI' }, { token: secret })).body.owner_id,
    ).toBe(user.userId);
    for (const body of [{}, { name: '' }, { name: '   ' }, { name: 7 }]) {
      const res = await api.post<CreatedClient>('/v1/clients', body, { token: user.session });
      expect(res.status).toBe(400);
      expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
    }
  });
});

describe('DELETE /v1/clients/{id}', () => {
  it('soft-deletes a non-default client, revokes its tokens, runs orgDeleted in the transaction', async () => {
    const owner = await createUser(server);
    const mate = await createUser(server);
    const created = await createClient(owner);
    const key = created.id.slice('client_'.length);
    await addMember(server, key, mate.userId);
    const mateToken = await createApiToken(server, mate, key);
    const seen: string[] = [];
    const hook = (_tx: unknown, org: { orgKey: string }) => {
      seen.push(org.orgKey);
      return Promise.resolve();
    };
    server.deps.hooks.orgDeleted.push(hook);
    try {
      const res = await api.delete(`/v1/clients/${created.id.replace('client_', 'org_')}`, {
        token: owner.session,
      });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ id: created.id, deleted: true });
    } finally {
      server.deps.hooks.orgDeleted.splice(server.deps.hooks.orgDeleted.indexOf(hook), 1);
    }
    expect(seen).toEqual([key]);
    expect((await verify(mateToken.secret)).status).toBe(401);
    expect(
      (await api.get<Page<ClientRow>>('/v1/clients', { token: mate.session })).body.data.map(
        (c: { id: string }) => c.id,
      ),
    ).not.toContain(created.id);
    const [row] = await server.deps.db.select().from(orgs).where(eq(orgs.id, key));
    expect(row?.deletedAt).toBeInstanceOf(Date);
    // Deleted: gone for every later request.
    expect((await api.delete(`/v1/clients/${created.id}`, { token: owner.session })).status).toBe(404);
    expect(
      (await api.get<Page<MemberRow>>(`/v1/clients/${created.id}/members`, { token: owner.session })).status,
    ).toBe(404);
  });

  it('rolls everything back when a hook fails (one transaction)', async () => {
    const owner = await createUser(server);
    const created = await createClient(owner);
    const key = created.id.slice('client_'.length);
    const token = await createApiToken(server, owner, key);
    const hook = () => Promise.reject(new Error('billing unavailable'));
    server.deps.hooks.orgDeleted.push(hook);
    try {
      expect((await api.delete(`/v1/clients/${created.id}`, { token: owner.session })).status).toBe(500);
    } finally {
      server.deps.hooks.orgDeleted.splice(server.deps.hooks.orgDeleted.indexOf(hook), 1);
    }
    expect((await verify(token.secret)).status).toBe(200);
    const [row] = await server.deps.db.select().from(orgs).where(eq(orgs.id, key));
    expect(row?.deletedAt).toBeNull();
  });

  it('refuses the default client (400), non-owners (403), strangers (403), unknown ids (404), another client’s token (403)', async () => {
    const owner = await createUser(server);
    const member = await createUser(server);
    const stranger = await createUser(server);
    const created = await createClient(owner);
    const key = created.id.slice('client_'.length);
    await addMember(server, key, member.userId, 'member');

    const dflt = await api.delete(`/v1/clients/${owner.clientId}`, { token: owner.session });
    expect(dflt.status).toBe(400);
    expect(detailOf(dflt.body).code).toBe('CANNOT_DELETE_DEFAULT');
    for (const who of [member, stranger]) {
      const res = await api.delete(`/v1/clients/${created.id}`, { token: who.session });
      expect(res.status).toBe(403);
      expect(detailOf(res.body).code).toBe('NO_ACCESS');
    }
    for (const id of ['client_doesnotexist', 'garbage', owner.email]) {
      const res = await api.delete(`/v1/clients/${encodeURIComponent(id)}`, { token: owner.session });
      expect(res.status).toBe(404);
      expect(detailOf(res.body).code).toBe('NOT_FOUND');
    }
    // A token bound to the owner's default client cannot reach the other client.
    const { secret } = await createApiToken(server, owner, owner.orgKey);
    expect((await api.delete(`/v1/clients/${created.id}`, { token: secret })).status).toBe(403);
    expect(
      (await api.get<Page<ClientRow>>('/v1/clients', { token: owner.session })).body.data.map(
        (c: { id: string }) => c.id,
      ),
    ).toContain(created.id);
  });
});
