import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createUser } from '../helpers/fixtures.js';
import { assertAuthChecks } from '../helpers/auth-checks.js';
import {
  approveUserCode,
  createDeviceAuthorization,
  denyUserCode,
  findByUserCode,
  pollDeviceCode,
} from '../../src/device/store.js';
import { generateUserCode, normaliseUserCode, USER_CODE_ALPHABET } from '../../src/device/user-code.js';
import { deviceCodes } from '../../src/db/schema.js';
import { hmacSecret } from '../../src/crypto/hash.js';
import { anyOf } from '../helpers/json.js';

// The device-code core shared by the terminal flow and the OAuth device grant (CONTRACT §6, §7):
// its exported API, as the OAuth and portal parts call it, against the real database.

const userCodeHash = (userCode: string) =>
  hmacSecret(server.deps.keys.hmac, `user_code:${normaliseUserCode(userCode)}`);

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

describe('user codes', () => {
  it('are XXXX-XXXX from the contract alphabet; input is case-insensitive and the hyphen optional', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const code = generateUserCode();
      expect(code).toMatch(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
      seen.add(code);
    }
    expect(seen.size).toBe(200);
    expect(USER_CODE_ALPHABET).toBe('BCDFGHJKLMNPQRSTVWXZ');
    expect(normaliseUserCode('bcdf-ghjk')).toBe('BCDFGHJK');
    expect(normaliseUserCode(' BcDfGhJk ')).toBe('BCDFGHJK');
    for (const bad of ['BCDF-GHJ', 'BCDF-GHJKL', 'ABCD-EFGH', 'BCDF_GHJK', ''])
      expect(normaliseUserCode(bad)).toBeNull();
  });
});

describe('the OAuth side of the store', () => {
  it('keeps the OAuth client, resources and scope; a user code from it is approved through /v1/auth/device/authorize', async () => {
    const owner = await createUser(server);
    const user = await createUser(server);
    await addMember(server, owner.orgKey, user.userId, 'member');
    const issued = await createDeviceAuthorization(server.deps, {
      flow: 'oauth',
      oauthClientId: 'svc-cli',
      resources: ['model', 'platform'],
      scope: 'model platform',
    });
    expect(issued).toMatchObject({ expiresIn: 600, interval: 5 });

    const pending = await findByUserCode(server.deps, issued.userCode.toLowerCase());
    expect(pending).toMatchObject({
      flow: 'oauth',
      oauthClientId: 'svc-cli',
      resources: ['model', 'platform'],
      scope: 'model platform',
      status: 'pending',
    });

    expect(await pollDeviceCode(server.deps, issued.deviceCode, 'oauth')).toEqual({
      status: 'authorization_pending',
    });
    const res = await client(server.url).post(
      '/v1/auth/device/authorize',
      { user_code: issued.userCode, client_id: owner.clientId },
      { token: user.session },
    );
    expect(res.body).toEqual({ status: 'approved', client_id: owner.orgId });
    // The approved code is no longer offered to an approval page.
    expect(await findByUserCode(server.deps, issued.userCode)).toBeNull();

    // A code is unknown to the other flow's poll: the terminal poll cannot take an OAuth approval.
    const terminal = await client(server.url).post('/v1/auth/device/poll', {
      device_code: issued.deviceCode,
    });
    expect(terminal).toMatchObject({ status: 400, body: { status: 'expired_token' } });

    const polled = await pollDeviceCode(server.deps, issued.deviceCode, 'oauth');
    expect(polled.status).toBe('approved');
    expect(polled.status === 'approved' && polled.row).toMatchObject({
      userId: user.userId,
      orgId: owner.orgKey,
      consumedAt: anyOf(Date),
    });
    expect(await pollDeviceCode(server.deps, issued.deviceCode, 'oauth')).toEqual({
      status: 'expired_token',
    });
  });

  it('runs onApproved inside the consuming transaction: a failure leaves the approval for the next poll', async () => {
    const user = await createUser(server);
    const issued = await createDeviceAuthorization(server.deps, { flow: 'oauth', oauthClientId: 'svc-cli' });
    await approveUserCode(server.deps, { userCode: issued.userCode, userId: user.userId });
    await expect(
      pollDeviceCode(server.deps, issued.deviceCode, 'oauth', () =>
        Promise.reject(new Error('signing key unavailable')),
      ),
    ).rejects.toThrow('signing key unavailable');
    const again = await pollDeviceCode(
      server.deps,
      issued.deviceCode,
      'oauth',
      (_tx, r) => `issued for ${r.orgId}`,
    );
    expect(again).toMatchObject({ status: 'approved', issued: `issued for ${user.orgKey}` });
  });

  it('approve and deny race on one code: exactly one decision sticks', async () => {
    const user = await createUser(server);
    const issued = await createDeviceAuthorization(server.deps, { flow: 'terminal' });
    const outcomes = await Promise.allSettled([
      approveUserCode(server.deps, { userCode: issued.userCode, userId: user.userId }),
      denyUserCode(server.deps, { userCode: issued.userCode, userId: user.userId }),
    ]);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(1);
    const polled = await pollDeviceCode(server.deps, issued.deviceCode, 'terminal');
    const approvedWon = outcomes[0].status === 'fulfilled';
    expect(polled.status).toBe(approvedWon ? 'approved' : 'access_denied');
  });

  it('counts a user code typed on the approval page against the user when asked to', async () => {
    const user = await createUser(server);
    for (let i = 0; i < 10; i++)
      expect(
        await findByUserCode(server.deps, 'ZZZZ-ZZZ' + 'BCDFGHJKLM'[i], { userId: user.userId }),
      ).toBeNull();
    await expect(findByUserCode(server.deps, 'ZZZZ-ZZZZ', { userId: user.userId })).rejects.toMatchObject({
      status: 429,
      code: 'RATE_LIMITED',
    });
  });

  it('purges rows a day past expiry when a new code is issued, and keeps recent ones', async () => {
    const stale = await createDeviceAuthorization(server.deps, { flow: 'terminal' });
    const recent = await createDeviceAuthorization(server.deps, { flow: 'terminal' });
    const dayAndABit = new Date(Date.now() - 25 * 60 * 60 * 1000);
    await server.deps.db
      .update(deviceCodes)
      .set({ expiresAt: dayAndABit })
      .where(eq(deviceCodes.userCodeHash, userCodeHash(stale.userCode)));
    await server.deps.db
      .update(deviceCodes)
      .set({ expiresAt: new Date(Date.now() - 60_000) })
      .where(eq(deviceCodes.userCodeHash, userCodeHash(recent.userCode)));
    await createDeviceAuthorization(server.deps, { flow: 'terminal' });
    const left = await server.deps.db.select({ h: deviceCodes.userCodeHash }).from(deviceCodes);
    expect(left.map((r) => r.h)).not.toContain(userCodeHash(stale.userCode));
    expect(left.map((r) => r.h)).toContain(userCodeHash(recent.userCode));
    // The recently expired one still answers expired_token from its row.
    expect(await pollDeviceCode(server.deps, recent.deviceCode, 'terminal')).toEqual({
      status: 'expired_token',
    });
  });

  it('refuses an expired user code', async () => {
    const user = await createUser(server);
    const issued = await createDeviceAuthorization(server.deps, { flow: 'terminal' });
    await server.deps.db
      .update(deviceCodes)
      .set({ expiresAt: new Date(Date.now() - 1) })
      .where(eq(deviceCodes.status, 'pending'));
    await expect(
      approveUserCode(server.deps, { userCode: issued.userCode, userId: user.userId }),
    ).rejects.toMatchObject({
      status: 400,
      code: 'INVALID_USER_CODE',
    });
  });
});

describe('auth checks on the device approval routes', () => {
  it.each([
    { method: 'POST', path: '/v1/auth/device/authorize', body: { user_code: 'BCDF-GHJK' } },
    { method: 'POST', path: '/v1/auth/device/deny', body: { user_code: 'BCDF-GHJK' } },
  ] as const)('%o', async (route) => {
    await assertAuthChecks(server, route, { accepts: 'session' });
  });
});
