import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { assertAuthChecks } from '../helpers/auth-checks.js';
import { memberships } from '../../src/db/schema.js';
import { anyOf, detailOf } from '../helpers/json.js';
import type { CreatedClient, MemberRow, MintedToken, Page, Verified } from '../helpers/answers.js';
import type { AuditOrigin } from '../../src/audit/context.js';

// Team membership (interface document: Team membership, States "Membership"; CONTRACT §5).

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

const members = (org: TestUser, as: TestUser) =>
  api.get<Page<MemberRow>>(`/v1/clients/${org.clientId}/members`, { token: as.session });
const add = (org: TestUser, as: TestUser, body: Record<string, unknown>) =>
  api.post<MemberRow>(`/v1/clients/${org.clientId}/members`, body, { token: as.session });
const remove = (org: TestUser, as: TestUser, userId: string) =>
  api.delete(`/v1/clients/${org.clientId}/members/${userId}`, { token: as.session });
const verify = (secret: string) => api.get<Verified>('/v1/auth/verify', { token: secret });

describe('auth checks on the member routes', () => {
  it.each([
    { method: 'GET', path: '/v1/clients/client_abcdefgh/members' },
    { method: 'POST', path: '/v1/clients/client_abcdefgh/members', body: { email: 'a@example.test' } },
    { method: 'DELETE', path: '/v1/clients/client_abcdefgh/members/usr_x' },
  ] as const)('%o', async (route) => {
    await assertAuthChecks(server, route);
  });
});

describe('GET /v1/clients/{client_id}/members', () => {
  it('lists every member to any live member, viewers included, in either id spelling', async () => {
    const owner = await createUser(server, { name: 'Olga' });
    const viewer = await createUser(server, { name: 'Vic' });
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');
    const res = await api.get<Page<MemberRow>>(`/v1/clients/${owner.orgId}/members`, {
      token: viewer.session,
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      data: [
        {
          user_id: owner.userId,
          email: owner.email,
          name: 'Olga',
          role: 'owner',
          created_at: anyOf(Number),
        },
        {
          user_id: viewer.userId,
          email: viewer.email,
          name: 'Vic',
          role: 'viewer',
          created_at: anyOf(Number),
        },
      ],
    });
  });

  it('pages by limit and offset (CONTRACT §3), oldest first; a limit or offset outside the rule is 400', async () => {
    const owner = await createUser(server);
    const joined = [owner.userId];
    for (let i = 0; i < 3; i++) {
      const member = await createUser(server);
      await addMember(server, owner.orgKey, member.userId);
      joined.push(member.userId);
    }
    const page = (q: string) =>
      api.get<Page<MemberRow>>(`/v1/clients/${owner.clientId}/members?${q}`, { token: owner.session });
    const ids = (res: { body: { data: { user_id: string }[] } }) => res.body.data.map((m) => m.user_id);
    expect(ids(await page(''))).toEqual(joined);
    expect(ids(await page('limit=3'))).toEqual(joined.slice(0, 3));
    expect(ids(await page('limit=3&offset=3'))).toEqual(joined.slice(3));
    for (const q of ['limit=0', 'limit=101', 'offset=-1']) {
      const res = await page(q);
      expect(res.status, q).toBe(400);
      expect(detailOf(res.body).code, q).toBe('VALIDATION_ERROR');
    }
  });

  it('403 NO_ACCESS for a stranger, 404 for an unknown client', async () => {
    const owner = await createUser(server);
    const stranger = await createUser(server);
    const res = await members(owner, stranger);
    expect(res.status).toBe(403);
    expect(detailOf(res.body).code).toBe('NO_ACCESS');
    const unknown = await api.get('/v1/clients/client_nosuchclient/members', { token: owner.session });
    expect(unknown.status).toBe(404);
    expect(detailOf(unknown.body).code).toBe('NOT_FOUND');
  });
});

describe('POST /v1/clients/{client_id}/members', () => {
  it('adds a registered, verified account by e-mail, trimmed and case-insensitive; role member by default', async () => {
    const owner = await createUser(server);
    const user = await createUser(server, { name: 'New Person' });
    const res = await add(owner, owner, { email: `  ${user.email.toUpperCase()} ` });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      user_id: user.userId,
      email: user.email,
      name: 'New Person',
      role: 'member',
      created_at: anyOf(Number),
    });
    const viewer = await createUser(server);
    expect((await add(owner, owner, { email: viewer.email, role: 'viewer' })).body.role).toBe('viewer');
    expect((await members(owner, user)).body.data).toHaveLength(3);
  });

  it('404 USER_NOT_FOUND for unknown and unverified accounts; never inferred from the domain', async () => {
    const owner = await createUser(server, { email: `boss-${Date.now()}@corp.test` });
    const colleague = await createUser(server, { email: `colleague-${Date.now()}@corp.test` });
    const unverified = await createUser(server, { verified: false });
    for (const email of ['nobody@example.test', unverified.email, '@corp.test', 'corp.test']) {
      const res = await add(owner, owner, { email });
      expect(res.status, email).toBe(404);
      expect(detailOf(res.body).code).toBe('USER_NOT_FOUND');
    }
    const list = (await members(owner, owner)).body.data.map((m: { user_id: string }) => m.user_id);
    expect(list).toEqual([owner.userId]);
    expect(list).not.toContain(colleague.userId);
  });

  it('409 ALREADY_MEMBER, 400 for role owner or a bad body, 403 for members and viewers', async () => {
    const owner = await createUser(server);
    const member = await createUser(server);
    const viewer = await createUser(server);
    const outsider = await createUser(server);
    await addMember(server, owner.orgKey, member.userId, 'member');
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');

    const dup = await add(owner, owner, { email: member.email });
    expect(dup.status).toBe(409);
    expect(detailOf(dup.body).code).toBe('ALREADY_MEMBER');
    const self = await add(owner, owner, { email: owner.email });
    expect(self.status).toBe(409);
    for (const body of [
      { email: outsider.email, role: 'owner' },
      { email: outsider.email, role: 'admin' },
      {},
      { email: 5 },
    ]) {
      const res = await add(owner, owner, body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
    }
    for (const who of [member, viewer, outsider]) {
      const res = await add(owner, who, { email: outsider.email });
      expect(res.status).toBe(403);
      expect(detailOf(res.body).code).toBe('NO_ACCESS');
    }
    expect((await members(owner, owner)).body.data).toHaveLength(3);
  });
});

describe('DELETE /v1/clients/{client_id}/members/{user_id}', () => {
  it('removes a member and revokes that user’s credentials for that client at once; teammates and other clients untouched', async () => {
    const owner = await createUser(server);
    const leaving = await createUser(server);
    const staying = await createUser(server);
    await addMember(server, owner.orgKey, leaving.userId);
    await addMember(server, owner.orgKey, staying.userId);
    const leavingHere = await createApiToken(server, leaving, owner.orgKey);
    const leavingOwn = await createApiToken(server, leaving, leaving.orgKey);
    const stayingHere = await createApiToken(server, staying, owner.orgKey);
    const removedHook: { orgKey: string; userId: string; origin: AuditOrigin }[] = [];
    const hook = (_tx: unknown, m: { orgKey: string; userId: string }, origin: AuditOrigin) => {
      removedHook.push({ ...m, origin });
      return Promise.resolve();
    };
    server.deps.hooks.memberRemoved.push(hook);
    try {
      const res = await remove(owner, owner, leaving.userId);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ removed: true });
    } finally {
      server.deps.hooks.memberRemoved.splice(server.deps.hooks.memberRemoved.indexOf(hook), 1);
    }
    // The hooks get who removed the member, for the events they write (OAuth: grant.revoked).
    expect(removedHook).toMatchObject([
      { orgKey: owner.orgKey, userId: leaving.userId, origin: { actor: { type: 'user', id: owner.userId } } },
    ]);
    const cut = await verify(leavingHere.secret);
    expect(cut.status).toBe(401);
    expect((await verify(leavingOwn.secret)).status).toBe(200);
    expect((await verify(stayingHere.secret)).status).toBe(200);
    expect((await members(owner, leaving)).status).toBe(403);
    const devices = await api.post<MintedToken>(
      '/v1/tokens',
      { client_id: owner.clientId },
      { token: leaving.session },
    );
    expect(devices.status).toBe(403);
  });

  it('is one transaction: a failing memberRemoved hook leaves the membership and the token in place', async () => {
    const owner = await createUser(server);
    const user = await createUser(server);
    await addMember(server, owner.orgKey, user.userId);
    const token = await createApiToken(server, user, owner.orgKey);
    const hook = () => Promise.reject(new Error('oauth store unavailable'));
    server.deps.hooks.memberRemoved.push(hook);
    try {
      expect((await remove(owner, owner, user.userId)).status).toBe(500);
    } finally {
      server.deps.hooks.memberRemoved.splice(server.deps.hooks.memberRemoved.indexOf(hook), 1);
    }
    expect((await verify(token.secret)).status).toBe(200);
    const rows = await server.deps.db
      .select()
      .from(memberships)
      .where(and(eq(memberships.orgId, owner.orgKey), eq(memberships.userId, user.userId)));
    expect(rows).toHaveLength(1);
  });

  it('400 CANNOT_REMOVE_OWNER, 404 for a non-member, 403 for members and strangers', async () => {
    const owner = await createUser(server);
    const member = await createUser(server);
    const other = await createUser(server);
    await addMember(server, owner.orgKey, member.userId);
    await addMember(server, owner.orgKey, other.userId);
    const res = await remove(owner, owner, owner.userId);
    expect(res.status).toBe(400);
    expect(detailOf(res.body).code).toBe('CANNOT_REMOVE_OWNER');
    const missing = await remove(owner, owner, 'usr_nobody');
    expect(missing.status).toBe(404);
    expect(detailOf(missing.body).code).toBe('NOT_FOUND');
    const stranger = await createUser(server);
    for (const who of [member, stranger]) {
      const r = await remove(owner, who, other.userId);
      expect(r.status).toBe(403);
      expect(detailOf(r.body).code).toBe('NO_ACCESS');
    }
    expect((await members(owner, owner)).body.data).toHaveLength(3);
  });

  it('an svc_ token of the owner manages its own client only', async () => {
    const owner = await createUser(server);
    const member = await createUser(server);
    await addMember(server, owner.orgKey, member.userId);
    const own = await createApiToken(server, owner, owner.orgKey);
    expect(
      (await api.get<Page<MemberRow>>(`/v1/clients/${owner.clientId}/members`, { token: own.secret })).status,
    ).toBe(200);
    const second = (
      await api.post<CreatedClient>('/v1/clients', { name: 'Second' }, { token: owner.session })
    ).body.id;
    expect(
      (await api.get<Page<MemberRow>>(`/v1/clients/${second}/members`, { token: own.secret })).status,
    ).toBe(403);
    expect(
      (await api.delete(`/v1/clients/${owner.clientId}/members/${member.userId}`, { token: own.secret }))
        .body,
    ).toEqual({ removed: true });
  });
});
