import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import pg from 'pg';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createApiToken, createUser } from '../helpers/fixtures.js';
import { liveRole, requireLiveMembership } from '../../src/orgs/membership.js';
import { AppError } from '../../src/http/errors.js';
import { detailError, readJson } from '../helpers/json.js';
import type { DeviceCode } from '../helpers/answers.js';

// The membership guard (Authentication 5, 6; issue item 8): 403 when the user is gone, 503 when the
// membership authority cannot answer — and then the request fails closed, never 200 and never 401.
// The database is really broken under a running server (the table renamed away, the pool ended);
// nothing of ours is mocked.

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

const expect503 = (res: { status: number; body: unknown }, what: string) => {
  expect(res.status, what).toBe(503);
  expect(readJson(detailError, res.body).detail.code, what).toBe('MEMBERSHIP_UNAVAILABLE');
};

describe('membership guard', () => {
  it('answers the live role, null for a non-member, and 403 NOT_A_MEMBER from requireLiveMembership', async () => {
    const owner = await createUser(server);
    const viewer = await createUser(server);
    const stranger = await createUser(server);
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');
    expect(await liveRole(server.deps.db, viewer.userId, owner.orgKey)).toBe('viewer');
    expect(await liveRole(server.deps.db, stranger.userId, owner.orgKey)).toBeNull();
    await expect(requireLiveMembership(server.deps.db, stranger.userId, owner.orgKey)).rejects.toMatchObject({
      status: 403,
      code: 'NOT_A_MEMBER',
    });
  });

  it('fails closed with 503 on every route when the memberships table cannot be read, and recovers', async () => {
    const owner = await createUser(server);
    const user = await createUser(server);
    await addMember(server, owner.orgKey, user.userId);
    const token = await createApiToken(server, user, owner.orgKey);
    const { user_code } = (await api.post<DeviceCode>('/v1/auth/device/code')).body;

    await server.deps.db.execute(sql`alter table memberships rename to memberships_unavailable`);
    try {
      const err = await requireLiveMembership(server.deps.db, user.userId, owner.orgKey).catch(
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(AppError);
      expect((err as AppError).status).toBe(503);
      expect503(await api.get('/v1/auth/verify', { token: token.secret }), 'verify');
      expect503(await api.post('/v1/tokens', {}, { token: user.session }), 'mint');
      expect503(
        await api.post(
          '/v1/auth/device/authorize',
          { user_code, client_id: owner.orgId },
          { token: user.session },
        ),
        'device authorize',
      );
      expect503(await api.get('/v1/clients', { token: user.session }), 'list clients');
      expect503(
        await api.get(`/v1/clients/${owner.clientId}/members`, { token: owner.session }),
        'list members',
      );
    } finally {
      await server.deps.db.execute(sql`alter table memberships_unavailable rename to memberships`);
    }
    expect((await api.get('/v1/auth/verify', { token: token.secret })).status).toBe(200);
    expect(
      (
        await api.post(
          '/v1/auth/device/authorize',
          { user_code, client_id: owner.orgId },
          { token: user.session },
        )
      ).status,
    ).toBe(200);
  });

  it('fails closed with 503 (not 401) when the database is gone altogether', async () => {
    const other = await startTestServer();
    try {
      const user = await createUser(other);
      const token = await createApiToken(other, user, user.orgKey);
      expect((await client(other.url).get('/v1/auth/verify', { token: token.secret })).status).toBe(200);
      await other.database.close();
      expect503(
        await client(other.url).get('/v1/auth/verify', { token: token.secret }),
        'verify after the pool ended',
      );
    } finally {
      // close() cannot end the pool twice and stops before dropping the database: drop it here.
      await other.close().catch(async () => {
        if (!other.databaseUrl) return;
        const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
        await admin.connect();
        await admin.query(
          `drop database if exists "${new URL(other.databaseUrl).pathname.slice(1)}" with (force)`,
        );
        await admin.end();
      });
    }
  });
});
