import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { memberships, orgs } from '../../src/db/schema.js';
import { clientIdOf, newOrgKey, orgIdOf } from '../../src/ids.js';
import { nextForkName } from '../../src/projects/service.js';
import { anyOf, detailOf, matching, readJson } from '../helpers/json.js';
import type { Page } from '../helpers/answers.js';
import { projectOut, type ProjectDetailOut, type ProjectOut } from '../../src/projects/schema.js';

// /v1/projects against the interface document (Projects, rules 1–5) and CONTRACT §10.

let server: TestServer;
let api: ReturnType<typeof client>;
let alice: TestUser; // owner of her default client and of `second`
let bob: TestUser; // a member of alice's default client
let vera: TestUser; // a viewer of alice's default client
let mallory: TestUser; // belongs to none of alice's clients
let second: string; // another client alice owns (stored key)

/** A further client owned by `owner` (client management has its own suite). */
async function createOrg(owner: TestUser, name = 'Second'): Promise<string> {
  const key = newOrgKey();
  await server.deps.db.insert(orgs).values({ id: key, name, ownerId: owner.userId });
  await server.deps.db.insert(memberships).values({ orgId: key, userId: owner.userId, role: 'owner' });
  return key;
}

async function create(user: TestUser, body: Record<string, unknown>) {
  const res = await api.post<ProjectOut>('/v1/projects', body, { token: user.session });
  expect(res.status).toBe(200);
  return readJson(projectOut, res.body);
}

beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
  [alice, bob, vera, mallory] = await Promise.all([
    createUser(server),
    createUser(server),
    createUser(server),
    createUser(server),
  ]);
  await addMember(server, alice.orgKey, bob.userId, 'member');
  await addMember(server, alice.orgKey, vera.userId, 'viewer');
  second = await createOrg(alice);
});
afterAll(async () => {
  await server?.close();
});

describe('create, list, get, update, delete', () => {
  it('creates a project (either org id spelling) and emits client_… ids', async () => {
    const p = await create(alice, { org_id: alice.orgId, name: 'Alpha', description: 'first' });
    expect(p).toEqual({
      id: matching(/^prj_[a-z2-7]{26}$/),
      org_id: alice.clientId,
      name: 'Alpha',
      description: 'first',
      created_at: anyOf(Number),
      updated_at: anyOf(Number),
      forked_from_id: null,
    });
    const listed = await api.get<Page<ProjectOut>>('/v1/projects', {
      token: alice.session,
      query: { org_id: alice.orgId },
    });
    expect(listed.status).toBe(200);
    expect(listed.body.data.map((x) => x.id)).toContain(p.id);
    const bySpelling = await api.get<Page<ProjectOut>>('/v1/projects', {
      token: alice.session,
      query: { org_id: alice.clientId },
    });
    expect(bySpelling.body.data).toEqual(listed.body.data);
  });

  it('requires org_id on the list (400) and validates paging (CONTRACT §3)', async () => {
    const missing = await api.get<Page<ProjectOut>>('/v1/projects', { token: alice.session });
    expect(missing.status).toBe(400);
    expect(detailOf(missing.body).code).toBe('VALIDATION_ERROR');
    const big = await api.get<Page<ProjectOut>>('/v1/projects', {
      token: alice.session,
      query: { org_id: alice.clientId, limit: 101 },
    });
    expect(big.status).toBe(400);
    const bad = await api.post<ProjectOut>(
      '/v1/projects',
      { org_id: alice.clientId },
      { token: alice.session },
    );
    expect(bad.status).toBe(400);
    expect(detailOf(bad.body).errors![0]!.path).toBe('name');
  });

  it('GET /{id} answers the Project plus brief, report_count, file_count', async () => {
    const p = await create(alice, { org_id: alice.clientId, name: 'Detail', brief: '# Goal' });
    const res = await api.get<ProjectDetailOut>(`/v1/projects/${p.id}`, { token: bob.session });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ ...p, brief: '# Goal', report_count: 0, file_count: 0 });
  });

  it('PATCH changes name, description and brief; a viewer cannot', async () => {
    const p = await create(alice, { org_id: alice.clientId, name: 'Patchable' });
    const res = await api.patch<ProjectDetailOut>(
      `/v1/projects/${p.id}`,
      { name: 'Patched', description: null, brief: 'new brief' },
      { token: bob.session },
    );
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ name: 'Patched', description: null, brief: 'new brief' });
    const viewer = await api.patch<ProjectDetailOut>(
      `/v1/projects/${p.id}`,
      { name: 'nope' },
      { token: vera.session },
    );
    expect(viewer.status).toBe(403);
    expect(detailOf(viewer.body).code).toBe('NO_ACCESS');
    expect(
      (await api.patch<ProjectDetailOut>(`/v1/projects/${p.id}`, {}, { token: bob.session })).status,
    ).toBe(400);
  });

  it('DELETE answers {deleted: true}; the project is gone afterwards (404)', async () => {
    const p = await create(alice, { org_id: alice.clientId, name: 'Doomed' });
    expect((await api.delete(`/v1/projects/${p.id}`, { token: vera.session })).status).toBe(403);
    const res = await api.delete(`/v1/projects/${p.id}`, { token: bob.session });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ deleted: true });
    const after = await api.get<ProjectDetailOut>(`/v1/projects/${p.id}`, { token: alice.session });
    expect(after.status).toBe(404);
    expect(detailOf(after.body).code).toBe('NOT_FOUND');
  });
});

describe('rule 1: 403 NO_ACCESS for another client, 404 NOT_FOUND for an unknown id', () => {
  it('answers an outsider 403 on every route, and a viewer 403 on writes', async () => {
    const p = await create(alice, { org_id: alice.clientId, name: 'Private' });
    const t = { token: mallory.session };
    const attempts = [
      api.get<ProjectDetailOut>(`/v1/projects/${p.id}`, t),
      api.patch<ProjectDetailOut>(`/v1/projects/${p.id}`, { name: 'x' }, t),
      api.delete(`/v1/projects/${p.id}`, t),
      api.post<ProjectOut>(`/v1/projects/${p.id}/fork`, undefined, t),
      api.post<ProjectOut>(`/v1/projects/${p.id}/transfer`, { target_org_id: mallory.clientId }, t),
      api.get<Page<ProjectOut>>('/v1/projects', { ...t, query: { org_id: alice.clientId } }),
      api.post<ProjectOut>('/v1/projects', { org_id: alice.clientId, name: 'intruder' }, t),
      api.post<ProjectOut>(
        '/v1/projects',
        { org_id: alice.clientId, name: 'viewer' },
        { token: vera.session },
      ),
    ];
    for (const res of await Promise.all(attempts)) {
      expect(res.status).toBe(403);
      expect(detailOf(res.body).code).toBe('NO_ACCESS');
    }
  });

  it('answers 404 NOT_FOUND for an unknown id and 400 for a malformed one', async () => {
    const res = await api.get('/v1/projects/prj_doesnotexist', { token: alice.session });
    expect(res.status).toBe(404);
    expect(detailOf(res.body)).toEqual({ code: 'NOT_FOUND', message: anyOf(String) });
    expect(
      (await api.post('/v1/projects/prj_doesnotexist/fork', undefined, { token: alice.session })).status,
    ).toBe(404);
    expect((await api.get('/v1/projects/not-an-id', { token: alice.session })).status).toBe(400);
  });

  it('needs a credential (401 INVALID_TOKEN with WWW-Authenticate)', async () => {
    const res = await api.get<Page<ProjectOut>>('/v1/projects', { query: { org_id: alice.clientId } });
    expect(res.status).toBe(401);
    expect(detailOf(res.body).code).toBe('INVALID_TOKEN');
    expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
  });
});

describe('svc_ tokens act within their own client', () => {
  it('lists and creates in the token’s client, and gets 403 elsewhere', async () => {
    const { secret } = await createApiToken(server, alice, alice.orgKey);
    const p = await api.post<ProjectOut>(
      '/v1/projects',
      { org_id: alice.orgId, name: 'By token' },
      { token: secret },
    );
    expect(p.status).toBe(200);
    const inSecond = await api.post<ProjectOut>(
      '/v1/projects',
      { org_id: clientIdOf(second), name: 'x' },
      { token: secret },
    );
    expect(inSecond.status).toBe(403);
    const fork = await api.post<ProjectOut>(
      `/v1/projects/${p.body.id}/fork`,
      { target_org_id: orgIdOf(second) },
      { token: secret },
    );
    expect(fork.status).toBe(403);
  });

  it('is refused once its user left the client (live membership)', async () => {
    const temp = await createUser(server);
    await addMember(server, alice.orgKey, temp.userId, 'member');
    const { secret } = await createApiToken(server, temp, alice.orgKey);
    expect(
      (await api.get<Page<ProjectOut>>('/v1/projects', { token: secret, query: { org_id: alice.clientId } }))
        .status,
    ).toBe(200);
    const { and, eq } = await import('drizzle-orm');
    await server.deps.db
      .delete(memberships)
      .where(and(eq(memberships.orgId, alice.orgKey), eq(memberships.userId, temp.userId)));
    const res = await api.get<Page<ProjectOut>>('/v1/projects', {
      token: secret,
      query: { org_id: alice.clientId },
    });
    expect(res.status).toBe(403);
  });
});

describe('rules 2–4: fork', () => {
  it('names forks (fork), (fork 2), (fork 3) and leaves the original untouched', async () => {
    const src = await create(alice, {
      org_id: alice.clientId,
      name: 'Base',
      description: 'd',
      brief: 'the brief',
    });
    const before = await api.get<ProjectDetailOut>(`/v1/projects/${src.id}`, { token: alice.session });
    const names: string[] = [];
    for (let i = 0; i < 3; i++) {
      const res = await api.post<ProjectOut>(`/v1/projects/${src.id}/fork`, undefined, {
        token: bob.session,
      });
      expect(res.status).toBe(200);
      expect(res.body.forked_from_id).toBe(src.id);
      expect(res.body.org_id).toBe(alice.clientId);
      names.push(res.body.name);
    }
    expect(names).toEqual(['Base (fork)', 'Base (fork 2)', 'Base (fork 3)']);
    const fork = (
      await api.get<Page<ProjectOut>>('/v1/projects', {
        token: alice.session,
        query: { org_id: alice.clientId, limit: 100 },
      })
    ).body.data.find((x) => x.name === 'Base (fork)');
    const copy = await api.get<ProjectDetailOut>(`/v1/projects/${fork!.id}`, { token: alice.session });
    expect(copy.body).toMatchObject({ brief: 'the brief', description: 'd' });
    expect(
      (await api.get<ProjectDetailOut>(`/v1/projects/${src.id}`, { token: alice.session })).body,
    ).toEqual(before.body);
  });

  it('takes the first free number after a deletion, and a supplied name as is', async () => {
    expect(nextForkName('N', new Set(['N (fork)', 'N (fork 3)']))).toBe('N (fork 2)');
    const src = await create(alice, { org_id: alice.clientId, name: 'Named' });
    const res = await api.post<ProjectOut>(
      `/v1/projects/${src.id}/fork`,
      { name: 'My copy' },
      { token: alice.session },
    );
    expect(res.body).toMatchObject({ name: 'My copy', forked_from_id: src.id });
  });

  it('forks into another of the caller’s clients with target_org_id, not into a foreign one', async () => {
    const src = await create(alice, { org_id: alice.clientId, name: 'Travel' });
    const res = await api.post<ProjectOut>(
      `/v1/projects/${src.id}/fork`,
      { target_org_id: orgIdOf(second) },
      { token: alice.session },
    );
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      org_id: clientIdOf(second),
      name: 'Travel (fork)',
      forked_from_id: src.id,
    });
    const foreign = await api.post<ProjectOut>(
      `/v1/projects/${src.id}/fork`,
      { target_org_id: mallory.clientId },
      { token: alice.session },
    );
    expect(foreign.status).toBe(403);
    // A viewer reads the source but cannot write in its client.
    expect(
      (await api.post<ProjectOut>(`/v1/projects/${src.id}/fork`, undefined, { token: vera.session })).status,
    ).toBe(403);
    // ... and can fork into a client of their own.
    const own = await api.post<ProjectOut>(
      `/v1/projects/${src.id}/fork`,
      { target_org_id: vera.clientId },
      { token: vera.session },
    );
    expect(own.status).toBe(200);
    expect(own.body.org_id).toBe(vera.clientId);
  });

  it('two forks at once get distinct names', async () => {
    const src = await create(alice, { org_id: alice.clientId, name: 'Race' });
    const results = await Promise.all(
      Array.from({ length: 4 }, () =>
        api.post<ProjectOut>(`/v1/projects/${src.id}/fork`, undefined, { token: alice.session }),
      ),
    );
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200]);
    expect(new Set(results.map((r) => r.body.name))).toEqual(
      new Set(['Race (fork)', 'Race (fork 2)', 'Race (fork 3)', 'Race (fork 4)']),
    );
  });
});

describe('rule 5: transfer', () => {
  it('moves the project when the caller owns both clients', async () => {
    const p = await create(alice, { org_id: alice.clientId, name: 'Mover' });
    const res = await api.post<ProjectOut>(
      `/v1/projects/${p.id}/transfer`,
      { target_org_id: orgIdOf(second) },
      { token: alice.session },
    );
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: p.id, org_id: clientIdOf(second), name: 'Mover' });
    // Now outside bob's client: 403 for him.
    expect((await api.get<ProjectDetailOut>(`/v1/projects/${p.id}`, { token: bob.session })).status).toBe(
      403,
    );
  });

  it('refuses a member (not owner) and a target the caller does not own', async () => {
    const p = await create(alice, { org_id: alice.clientId, name: 'Stay' });
    const byMember = await api.post<ProjectOut>(
      `/v1/projects/${p.id}/transfer`,
      { target_org_id: bob.clientId },
      { token: bob.session },
    );
    expect(byMember.status).toBe(403);
    expect(detailOf(byMember.body).code).toBe('NO_ACCESS');
    const foreign = await api.post<ProjectOut>(
      `/v1/projects/${p.id}/transfer`,
      { target_org_id: mallory.clientId },
      { token: alice.session },
    );
    expect(foreign.status).toBe(403);
    expect(
      (await api.post<ProjectOut>(`/v1/projects/${p.id}/transfer`, {}, { token: alice.session })).status,
    ).toBe(400);
    expect(
      (await api.get<ProjectDetailOut>(`/v1/projects/${p.id}`, { token: alice.session })).body.org_id,
    ).toBe(alice.clientId);
  });

  it('a transfer racing a fork leaves a consistent state', async () => {
    const p = await create(alice, { org_id: alice.clientId, name: 'Contested', brief: 'b' });
    const [fork, transfer] = await Promise.all([
      api.post<ProjectOut>(`/v1/projects/${p.id}/fork`, undefined, { token: alice.session }),
      api.post<ProjectOut>(
        `/v1/projects/${p.id}/transfer`,
        { target_org_id: clientIdOf(second) },
        { token: alice.session },
      ),
    ]);
    expect(transfer.status).toBe(200);
    expect(fork.status).toBe(200);
    expect(fork.body.forked_from_id).toBe(p.id);
    // The fork landed in one of the two clients with a full copy; the original is in the target.
    expect([alice.clientId, clientIdOf(second)]).toContain(fork.body.org_id);
    const copy = await api.get<ProjectDetailOut>(`/v1/projects/${fork.body.id}`, { token: alice.session });
    expect(copy.body.brief).toBe('b');
    expect(
      (await api.get<ProjectDetailOut>(`/v1/projects/${p.id}`, { token: alice.session })).body.org_id,
    ).toBe(clientIdOf(second));
  });
});
