import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq, isNull } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { apiTokens, deviceCodes } from '../../src/db/schema.js';
import { hmacSecret } from '../../src/crypto/hash.js';
import { anyOf, detailOf, matching } from '../helpers/json.js';
import type { DeviceCode, DevicePoll } from '../helpers/answers.js';

// Terminal device flow (interface document: Device flow, Device login row; CONTRACT §6).

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

const startLogin = async () => (await api.post<DeviceCode>('/v1/auth/device/code')).body;
const poll = (deviceCode: string) =>
  api.post<DevicePoll>('/v1/auth/device/poll', { device_code: deviceCode });
const approve = (user: TestUser, userCode: string, clientId?: string) =>
  api.post(
    '/v1/auth/device/authorize',
    { user_code: userCode, ...(clientId ? { client_id: clientId } : {}) },
    { token: user.session },
  );

async function activeTokens(orgKey: string, userId: string) {
  return server.deps.db
    .select()
    .from(apiTokens)
    .where(and(eq(apiTokens.orgId, orgKey), eq(apiTokens.userId, userId), isNull(apiTokens.revokedAt)));
}

describe('POST /v1/auth/device/code', () => {
  it('issues a device code and an XXXX-XXXX user code with the contract fields', async () => {
    const res = await api.post<DeviceCode>('/v1/auth/device/code');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      device_code: anyOf(String),
      user_code: matching(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/),
      verification_uri: `${server.v2Url}/account/device`,
      verification_uri_complete: `${server.v2Url}/account/device?user_code=${res.body.user_code}`,
      expires_in: 600,
      interval: 5,
    });
  });

  it('stores both codes only as HMACs', async () => {
    const { device_code, user_code } = await startLogin();
    const dump = JSON.stringify(await server.deps.db.select().from(deviceCodes));
    expect(dump).not.toContain(device_code);
    expect(dump).not.toContain(user_code.replace('-', ''));
    expect(dump).not.toContain(user_code);
  });
});

describe('device login, end to end', () => {
  it('pending → approved (lower case, no hyphen) → complete exactly once → expired_token', async () => {
    const user = await createUser(server);
    const { device_code, user_code } = await startLogin();
    expect(await poll(device_code)).toMatchObject({ status: 200, body: { status: 'authorization_pending' } });

    const ok = await approve(user, user_code.replace('-', '').toLowerCase());
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({ status: 'approved', client_id: user.orgId });

    const done = await poll(device_code);
    expect(done.status).toBe(200);
    expect(done.body).toEqual({
      status: 'complete',
      token: matching(/^svc_[A-Za-z0-9_-]{43}$/),
      client_id: user.orgId,
      email: user.email,
    });
    expect(done.headers.get('cache-control')).toBe('no-store');
    const [row] = await activeTokens(user.orgKey, user.userId);
    expect(row?.tokenName).toBe('Device login');
    expect(row?.tokenHash).toBe(hmacSecret(server.deps.keys.hmac, done.body.token!));

    expect(await poll(device_code)).toMatchObject({ status: 400, body: { status: 'expired_token' } });
  });

  it('answers slow_down with a longer interval when polled faster than the interval', async () => {
    const { device_code } = await startLogin();
    expect((await poll(device_code)).body).toEqual({ status: 'authorization_pending' });
    expect(await poll(device_code)).toMatchObject({
      status: 200,
      body: { status: 'slow_down', interval: 10 },
    });
    // Once the interval has passed (moved back in the database rather than slept), pending again.
    await server.deps.db.update(deviceCodes).set({ lastPolledAt: new Date(Date.now() - 11_000) });
    expect((await poll(device_code)).body).toEqual({ status: 'authorization_pending' });
  });

  it('answers access_denied after a deny, and expired_token for unknown and expired codes', async () => {
    const user = await createUser(server);
    const denied = await startLogin();
    const res = await api.post(
      '/v1/auth/device/deny',
      { user_code: denied.user_code },
      { token: user.session },
    );
    expect(res).toMatchObject({ status: 200, body: { status: 'denied' } });
    expect(await poll(denied.device_code)).toMatchObject({ status: 400, body: { status: 'access_denied' } });
    // A denied code cannot be approved afterwards.
    expect((await approve(user, denied.user_code)).status).toBe(400);

    expect(await poll('no-such-device-code')).toMatchObject({
      status: 400,
      body: { status: 'expired_token' },
    });

    const old = await startLogin();
    await approve(user, old.user_code);
    await server.deps.db
      .update(deviceCodes)
      .set({ expiresAt: new Date(Date.now() - 1000) })
      .where(
        eq(deviceCodes.deviceCodeHash, hmacSecret(server.deps.keys.hmac, `device_code:${old.device_code}`)),
      );
    expect(await poll(old.device_code)).toMatchObject({ status: 400, body: { status: 'expired_token' } });
  });

  it('validates the poll body', async () => {
    const res = await api.post('/v1/auth/device/poll', {});
    expect(res.status).toBe(400);
    expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
  });
});

describe('POST /v1/auth/device/authorize', () => {
  it('lets the user choose one of several live memberships, in either id spelling', async () => {
    const owner = await createUser(server);
    const user = await createUser(server);
    await addMember(server, owner.orgKey, user.userId, 'member');
    for (const spelling of [owner.orgId, owner.clientId]) {
      const { device_code, user_code } = await startLogin();
      expect((await approve(user, user_code, spelling)).body).toEqual({
        status: 'approved',
        client_id: owner.orgId,
      });
      expect((await poll(device_code)).body).toMatchObject({ status: 'complete', client_id: owner.orgId });
    }
  });

  it('refuses an org outside the live memberships (403), an e-mail or garbage (400), and an unknown code (400)', async () => {
    const user = await createUser(server);
    const stranger = await createUser(server);
    const { device_code, user_code } = await startLogin();
    const foreign = await approve(user, user_code, stranger.orgId);
    expect(foreign.status).toBe(403);
    expect(detailOf(foreign.body).code).toBe('NO_ACCESS');
    for (const bad of [stranger.email, 'garbage', stranger.orgKey]) {
      const res = await approve(user, user_code, bad);
      expect(res.status).toBe(400);
      expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
    }
    // Nothing above approved the code.
    expect((await poll(device_code)).body.status).toBe('authorization_pending');

    const wrong = await approve(user, 'BBBB-BBBB');
    expect(wrong.status).toBe(400);
    expect(detailOf(wrong.body).code).toBe('INVALID_USER_CODE');
  });

  it('refuses an org the user has left (403) and a code approved twice (400)', async () => {
    const owner = await createUser(server);
    const user = await createUser(server);
    await addMember(server, owner.orgKey, user.userId, 'viewer');
    const { user_code } = await startLogin();
    expect((await approve(user, user_code, owner.orgId)).status).toBe(200);
    expect((await approve(user, user_code, owner.orgId)).status).toBe(400);

    const { memberships } = await import('../../src/db/schema.js');
    await server.deps.db
      .delete(memberships)
      .where(and(eq(memberships.orgId, owner.orgKey), eq(memberships.userId, user.userId)));
    const next = await startLogin();
    const left = await approve(user, next.user_code, owner.orgId);
    expect(left.status).toBe(403);
    expect(detailOf(left.body).code).toBe('NO_ACCESS');
  });

  it('limits wrong user codes per user: ten in 10 minutes, then 429 with Retry-After even for a right code', async () => {
    const user = await createUser(server);
    const other = await createUser(server);
    const { user_code } = await startLogin();
    for (let i = 0; i < 10; i++) expect((await approve(user, 'BBBB-BBB' + 'CDFGHJKLMN'[i])).status).toBe(400);
    const blocked = await approve(user, user_code);
    expect(blocked.status).toBe(429);
    expect(detailOf(blocked.body).code).toBe('RATE_LIMITED');
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
    // Per user, not global: someone else can still approve.
    expect((await approve(other, user_code)).status).toBe(200);
  });

  it('needs a session: no credential or an svc_ token is 401', async () => {
    const user = await createUser(server);
    const { user_code } = await startLogin();
    const anon = await api.post('/v1/auth/device/authorize', { user_code });
    expect(anon.status).toBe(401);
    expect(anon.headers.get('www-authenticate')).toBe('Bearer');
    const { secret } = await createApiToken(server, user, user.orgKey);
    expect((await api.post('/v1/auth/device/authorize', { user_code }, { token: secret })).status).toBe(401);
  });
});

describe('per-address limit on the device routes (CONTRACT §1)', () => {
  it('answers 429 RATE_LIMITED with Retry-After past RATE_LIMIT_IP_PER_MIN', async () => {
    const limited = await startTestServer({ env: { RATE_LIMIT_IP_PER_MIN: '3' } });
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++)
        statuses.push((await client(limited.url).post('/v1/auth/device/code')).status);
      expect(statuses).toEqual([200, 200, 200, 429]);
      const res = await client(limited.url).post('/v1/auth/device/poll', { device_code: 'x' });
      expect(res.status).toBe(429);
      expect(detailOf(res.body).code).toBe('RATE_LIMITED');
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    } finally {
      await limited.close();
    }
  });
});

describe('credential rotation and races (Authentication 3; CONTRACT §6)', () => {
  it('a new device login rotates only that user’s credential in that org; teammates are unaffected', async () => {
    const owner = await createUser(server);
    const mate = await createUser(server);
    await addMember(server, owner.orgKey, mate.userId);
    const mateToken = await createApiToken(server, mate, owner.orgKey);
    const ownerOther = await createApiToken(server, owner, owner.orgKey);

    const first = await startLogin();
    await approve(owner, first.user_code);
    const firstToken = (await poll(first.device_code)).body.token!;
    const second = await startLogin();
    await approve(owner, second.user_code);
    const secondToken = (await poll(second.device_code)).body.token!;

    const active = await activeTokens(owner.orgKey, owner.userId);
    expect(active.map((t) => t.tokenHash)).toEqual([hmacSecret(server.deps.keys.hmac, secondToken)]);
    expect(firstToken).not.toBe(secondToken);
    expect(active[0]!.id).not.toBe(ownerOther.id);
    expect((await activeTokens(owner.orgKey, mate.userId)).map((t) => t.id)).toEqual([mateToken.id]);
  });

  it('two racing polls of an approved code: exactly one gets a token', async () => {
    const user = await createUser(server);
    const { device_code, user_code } = await startLogin();
    await approve(user, user_code);
    const results = await Promise.all(Array.from({ length: 4 }, () => poll(device_code)));
    const complete = results.filter((r) => r.body.status === 'complete');
    expect(complete).toHaveLength(1);
    expect(results.filter((r) => r.status === 400 && r.body.status === 'expired_token')).toHaveLength(3);
    expect(await activeTokens(user.orgKey, user.userId)).toHaveLength(1);
  });

  it('a user removed between approval and poll gets access_denied, not a credential', async () => {
    const owner = await createUser(server);
    const user = await createUser(server);
    await addMember(server, owner.orgKey, user.userId);
    const { device_code, user_code } = await startLogin();
    await approve(user, user_code, owner.clientId);
    const { memberships } = await import('../../src/db/schema.js');
    await server.deps.db
      .delete(memberships)
      .where(and(eq(memberships.orgId, owner.orgKey), eq(memberships.userId, user.userId)));
    expect(await poll(device_code)).toMatchObject({ status: 400, body: { status: 'access_denied' } });
    expect(await activeTokens(owner.orgKey, user.userId)).toHaveLength(0);
  });
});
