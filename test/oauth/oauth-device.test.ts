import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as oauth from 'oauth4webapi';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { approveUserCode } from '../../src/device/store.js';
import type { AppError } from '../../src/http/errors.js';
import { jsonAs, type JsonObject } from '../helpers/json.js';

// The device authorization grant (RFC 8628) through oauth4webapi: authorization_pending, slow_down,
// approval on the shared device store, exactly-once exchange, client binding, resources named, and
// the per-user limit on wrong user codes (brute force).

let server: TestServer;
let user: TestUser;
let as: oauth.AuthorizationServer;
const insecure = { [oauth.allowInsecureRequests]: true } as const;
const cli = { client_id: 'svc-cli' };

beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
  as = await oauth.processDiscoveryResponse(
    new URL(server.v2Url),
    await oauth.discoveryRequest(new URL(server.v2Url), { algorithm: 'oauth2', ...insecure }),
  );
});
afterAll(async () => {
  await server?.close();
});

const json = (res: Response) => jsonAs<JsonObject>(res);

describe('device grant (RFC 8628)', () => {
  it('polls authorization_pending, slow_down, then issues both grants once approved', async () => {
    const da = await oauth.processDeviceAuthorizationResponse(
      as,
      cli,
      await oauth.deviceAuthorizationRequest(as, cli, oauth.None(), {}, insecure),
    );
    expect(da.verification_uri).toBe(`${server.v2Url}/account/device`);
    expect(da.user_code).toMatch(/^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
    const poll = () => oauth.deviceCodeGrantRequest(as, cli, oauth.None(), da.device_code, insecure);
    await expect(oauth.processDeviceCodeResponse(as, cli, await poll())).rejects.toMatchObject({
      error: 'authorization_pending',
    });
    await expect(oauth.processDeviceCodeResponse(as, cli, await poll())).rejects.toMatchObject({
      error: 'slow_down',
    });
    await approveUserCode(server.deps, { userCode: da.user_code, userId: user.userId });
    const tokens = await oauth.processDeviceCodeResponse(as, cli, await poll());
    expect(tokens.scope).toBe('platform');
    expect((tokens.grants as unknown[]).length).toBe(2);
    const claims = await oauth.validateJwtAccessToken(
      as,
      new Request(`${server.v2Url}/mcp/platform`, {
        headers: { authorization: `Bearer ${tokens.access_token}` },
      }),
      `${server.v2Url}/mcp/platform`,
      insecure,
    );
    expect(claims.org).toBe(user.orgId);
    // Exactly once.
    await expect(oauth.processDeviceCodeResponse(as, cli, await poll())).rejects.toMatchObject({
      error: 'expired_token',
    });
  });

  it('a token request naming one of the approved resources gets it at the top level, and both grants', async () => {
    const da = await oauth.processDeviceAuthorizationResponse(
      as,
      cli,
      await oauth.deviceAuthorizationRequest(as, cli, oauth.None(), {}, insecure),
    );
    await approveUserCode(server.deps, { userCode: da.user_code, userId: user.userId });
    const res = await oauth.deviceCodeGrantRequest(as, cli, oauth.None(), da.device_code, {
      ...insecure,
      additionalParameters: { resource: `${server.v2Url}/v1` },
    });
    const tokens = await oauth.processDeviceCodeResponse(as, cli, res);
    expect(tokens.scope).toBe('model account'); // svc-cli's default (CONTRACT §7)
    const grants = tokens.grants as { resource: string; access_token: string }[];
    expect(grants.map((g) => g.resource).sort()).toEqual([
      `${server.v2Url}/mcp/platform`,
      `${server.v2Url}/v1`,
    ]);
    expect(grants.find((g) => g.resource === `${server.v2Url}/v1`)!.access_token).toBe(tokens.access_token);
  });

  it('names one resource, refuses a client that did not ask, and ends in access_denied when denied', async () => {
    const params = { resource: `${server.v2Url}/v1` };
    const da = await oauth.processDeviceAuthorizationResponse(
      as,
      cli,
      await oauth.deviceAuthorizationRequest(as, cli, oauth.None(), params, insecure),
    );
    await approveUserCode(server.deps, { userCode: da.user_code, userId: user.userId });
    const reg = await json(
      await fetch(`${server.v2Url}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          grant_types: ['urn:ietf:params:oauth:grant-type:device_code'],
          token_endpoint_auth_method: 'none',
        }),
      }),
    );
    const thief = { client_id: reg.client_id as string };
    const stolen = await oauth.deviceCodeGrantRequest(as, thief, oauth.None(), da.device_code, insecure);
    expect((await json(stolen)).error).toBe('invalid_grant');
    const tokens = await oauth.processDeviceCodeResponse(
      as,
      cli,
      await oauth.deviceCodeGrantRequest(as, cli, oauth.None(), da.device_code, insecure),
    );
    expect(tokens.scope).toBe('model account'); // svc-cli's default (CONTRACT §7)
    const bad = await fetch(`${server.v2Url}/oauth/device_authorization`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ client_id: 'svc-cli', resource: 'https://evil.example/' }),
    });
    expect((await json(bad)).error).toBe('invalid_target');
  });

  it('limits wrong user codes per user (brute force: ten in 10 minutes, then 429)', async () => {
    const victim = await createUser(server);
    const statuses: number[] = [];
    for (let i = 0; i < 11; i++) {
      try {
        await approveUserCode(server.deps, { userCode: 'BCDF-GHJK', userId: victim.userId });
      } catch (err) {
        statuses.push((err as AppError).status);
      }
    }
    expect(statuses.slice(0, 9).every((s) => s === 400)).toBe(true);
    expect(statuses.at(-1)).toBe(429);
  });
});
