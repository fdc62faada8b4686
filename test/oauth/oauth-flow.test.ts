import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as oauth from 'oauth4webapi';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createUser, type TestUser } from '../helpers/fixtures.js';
import { driveConsent } from '../helpers/oauth.js';
import { verifyAccessToken } from '../../oauth/verify.js';
import { jsonAs, type JsonObject } from '../helpers/json.js';

// The authorization server through oauth4webapi, a strict independent client, over real HTTP on the
// V2 and LIGHT origins (CONTRACT §7): discovery, DCR, code + PKCE per resource and for both, the two
// grants, refresh, revocation, introspection, iss validation and RFC 9068 validation.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

/** A response body as loosely typed JSON (assertions check its shape). */
const json = (res: Response) => jsonAs<JsonObject>(res);

const insecure = { [oauth.allowInsecureRequests]: true } as const;
const REDIRECT = 'http://127.0.0.1:9/callback';

async function discover(origin: string): Promise<oauth.AuthorizationServer> {
  const issuer = new URL(origin);
  return oauth.processDiscoveryResponse(
    issuer,
    await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecure }),
  );
}

async function register(as: oauth.AuthorizationServer, metadata: Partial<oauth.Client>) {
  const res = await oauth.dynamicClientRegistrationRequest(as, metadata, insecure);
  return oauth.processDynamicClientRegistrationResponse(res);
}

interface FlowOptions {
  client: oauth.Client;
  clientAuth: oauth.ClientAuth;
  resources?: string[];
  tokenResources?: string[];
  org?: string;
  redirectUri?: string;
}

/** One authorization code + PKCE flow: authorize, consent (as the user), exchange. */
async function codeFlow(as: oauth.AuthorizationServer, user: TestUser, opts: FlowOptions) {
  const redirectUri = opts.redirectUri ?? REDIRECT;
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const url = new URL(as.authorization_endpoint!);
  url.searchParams.set('client_id', opts.client.client_id);
  url.searchParams.set('redirect_uri', redirectUri);
  url.searchParams.set('response_type', 'code');
  url.searchParams.set('state', state);
  url.searchParams.set('code_challenge', await oauth.calculatePKCECodeChallenge(verifier));
  url.searchParams.set('code_challenge_method', 'S256');
  for (const r of opts.resources ?? []) url.searchParams.append('resource', r);
  const consent = await driveConsent(url.href, user.session, { org: opts.org });
  expect(consent.postStatus).toBe(303);
  const params = oauth.validateAuthResponse(as, opts.client, new URL(consent.location!), state);
  const additionalParameters = new URLSearchParams();
  for (const r of opts.tokenResources ?? []) additionalParameters.append('resource', r);
  const res = await oauth.authorizationCodeGrantRequest(
    as,
    opts.client,
    opts.clientAuth,
    params,
    redirectUri,
    verifier,
    {
      ...insecure,
      additionalParameters,
    },
  );
  return { res, params, verifier, redirectUri };
}

type Grant = {
  resource: string;
  scope: string;
  access_token: string;
  token_type: string;
  expires_in: number;
  refresh_token: string;
};

describe('discovery (RFC 8414, RFC 9728)', () => {
  it.each(['v2Url', 'lightUrl'] as const)('serves metadata with this origin as issuer on %s', async (key) => {
    const origin = server[key];
    const as = await discover(origin);
    expect(as).toMatchObject({
      issuer: origin,
      authorization_endpoint: `${origin}/oauth/authorize`,
      token_endpoint: `${origin}/oauth/token`,
      device_authorization_endpoint: `${origin}/oauth/device_authorization`,
      registration_endpoint: `${origin}/oauth/register`,
      revocation_endpoint: `${origin}/oauth/revoke`,
      introspection_endpoint: `${origin}/oauth/introspect`,
      jwks_uri: `${origin}/.well-known/jwks.json`,
      response_types_supported: ['code'],
      grant_types_supported: [
        'authorization_code',
        'refresh_token',
        'urn:ietf:params:oauth:grant-type:device_code',
      ],
      code_challenge_methods_supported: ['S256'],
      token_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post'],
      scopes_supported: ['model', 'platform', 'platform:read', 'account'],
      authorization_response_iss_parameter_supported: true,
      client_id_metadata_document_supported: true,
    });
    for (const [path, scopes] of [
      ['mcp/platform', ['platform', 'platform:read']],
      ['v1', ['model', 'account']],
    ] as const) {
      const prm = await oauth.processResourceDiscoveryResponse(
        new URL(`${origin}/${path}`),
        await oauth.resourceDiscoveryRequest(new URL(`${origin}/${path}`), insecure),
      );
      expect(prm).toEqual({
        resource: `${origin}/${path}`,
        authorization_servers: [origin],
        scopes_supported: scopes,
        bearer_methods_supported: ['header'],
      });
    }
  });
});

describe('authorization code + PKCE, two grants per approval (CONTRACT §7)', () => {
  it('issues both grants by default to a DCR public client, each verifiable with validateJwtAccessToken', async () => {
    const origin = server.v2Url;
    const as = await discover(origin);
    const reg = await register(as, {
      redirect_uris: [REDIRECT],
      token_endpoint_auth_method: 'none',
      client_name: 'Flow test',
    });
    expect(reg.client_secret).toBeUndefined();
    const client = { client_id: reg.client_id };
    const user = await createUser(server);
    const { res } = await codeFlow(as, user, { client, clientAuth: oauth.None() });
    expect(res.headers.get('cache-control')).toBe('no-store');
    const body = await oauth.processAuthorizationCodeResponse(as, client, res);
    expect(body.token_type).toBe('bearer');
    expect(body.expires_in).toBe(900);
    expect(body.scope).toBe('platform');
    expect(body.refresh_token).toMatch(/^srt_/);
    const grants = body.grants as Grant[];
    expect(grants.map((g) => g.resource).sort()).toEqual([`${origin}/mcp/platform`, `${origin}/v1`]);
    const platform = grants.find((g) => g.scope === 'platform')!;
    expect(platform.access_token).toBe(body.access_token);
    expect(platform.refresh_token).toBe(body.refresh_token);
    expect(Object.keys(body).sort()).toEqual([
      'access_token',
      'expires_in',
      'grants',
      'refresh_token',
      'scope',
      'token_type',
    ]);
    for (const g of grants) {
      expect(g).toMatchObject({ token_type: 'Bearer', expires_in: 900 });
      const req = new Request(g.resource, { headers: { authorization: `Bearer ${g.access_token}` } });
      const claims = await oauth.validateJwtAccessToken(as, req, g.resource, insecure);
      expect(claims).toMatchObject({
        iss: origin,
        sub: user.userId,
        client_id: reg.client_id,
        scope: g.scope,
        org: user.orgId,
      });
    }
    expect(grants[0]!.refresh_token).not.toBe(grants[1]!.refresh_token);
  });

  it.each([
    ['platform', '/mcp/platform'],
    ['model', '/v1'],
  ] as const)('asks for %s alone on the LIGHT origin', async (scope, path) => {
    const origin = server.lightUrl;
    const as = await discover(origin);
    const client = { client_id: 'svc-cli' };
    const user = await createUser(server);
    const { res } = await codeFlow(as, user, {
      client,
      clientAuth: oauth.None(),
      resources: [`${origin}${path}`],
    });
    const body = await oauth.processAuthorizationCodeResponse(as, client, res);
    // svc-cli's /v1 grant carries `account` by default (CONTRACT §7).
    expect(body.scope).toBe(scope === 'model' ? 'model account' : scope);
    expect((body.grants as Grant[]).map((g) => g.resource)).toEqual([`${origin}${path}`]);
    const ok = await verifyAccessToken(server.deps, body.access_token, { resource: scope, origin });
    expect(ok.userId).toBe(user.userId);
  });

  it('accepts the resource parameter repeated, naming both resources', async () => {
    const origin = server.v2Url;
    const as = await discover(origin);
    const client = { client_id: 'svc-cli' };
    const user = await createUser(server);
    const { res } = await codeFlow(as, user, {
      client,
      clientAuth: oauth.None(),
      resources: [`${origin}/v1`, `${origin}/mcp/platform`],
    });
    const body = await oauth.processAuthorizationCodeResponse(as, client, res);
    expect((body.grants as Grant[]).map((g) => g.scope).sort()).toEqual(['model account', 'platform']);
    expect(body.scope).toBe('platform');
  });

  it('puts the resource the token request names at the top level, lists every approved grant, and refuses an unapproved one with invalid_target', async () => {
    const origin = server.v2Url;
    const as = await discover(origin);
    const client = { client_id: 'svc-cli' };
    const user = await createUser(server);
    // Both approved (none named at /oauth/authorize); the token request names the model resource.
    const named = await codeFlow(as, user, {
      client,
      clientAuth: oauth.None(),
      tokenResources: [`${origin}/v1`],
    });
    const body = await oauth.processAuthorizationCodeResponse(as, client, named.res);
    expect(body.scope).toBe('model account'); // svc-cli's default (CONTRACT §7)
    const grants = body.grants as Grant[];
    expect(grants.map((g) => g.resource).sort()).toEqual([`${origin}/mcp/platform`, `${origin}/v1`]);
    const model = grants.find((g) => g.scope === 'model account')!; // svc-cli's default (CONTRACT §7)
    expect([body.access_token, body.refresh_token]).toEqual([model.access_token, model.refresh_token]);
    const widened = await codeFlow(as, user, {
      client,
      clientAuth: oauth.None(),
      resources: [`${origin}/v1`],
      tokenResources: [`${origin}/mcp/platform`],
    });
    expect(widened.res.status).toBe(400);
    expect((await json(widened.res)).error).toBe('invalid_target');
  });

  it('acts for the organization chosen on the consent page (org claim, org_ spelling)', async () => {
    const owner = await createUser(server);
    const member = await createUser(server);
    await addMember(server, owner.orgKey, member.userId, 'member');
    const as = await discover(server.v2Url);
    const client = { client_id: 'svc-cli' };
    const { res } = await codeFlow(as, member, { client, clientAuth: oauth.None(), org: owner.clientId });
    const body = await oauth.processAuthorizationCodeResponse(as, client, res);
    const claims = await oauth.validateJwtAccessToken(
      as,
      new Request(`${server.v2Url}/mcp/platform`, {
        headers: { authorization: `Bearer ${body.access_token}` },
      }),
      `${server.v2Url}/mcp/platform`,
      insecure,
    );
    expect(claims.org).toBe(owner.orgId);
  });

  it('authenticates a confidential DCR client with client_secret_basic; a wrong secret is 401 invalid_client', async () => {
    const as = await discover(server.v2Url);
    const reg = await register(as, { redirect_uris: [REDIRECT], client_name: 'Confidential' });
    expect(reg.token_endpoint_auth_method).toBe('client_secret_basic');
    expect(reg.client_secret).toMatch(/^scs_/);
    expect(reg.client_secret_expires_at).toBe(0);
    const client = { client_id: reg.client_id };
    const user = await createUser(server);
    const good = await codeFlow(as, user, {
      client,
      clientAuth: oauth.ClientSecretBasic(reg.client_secret as string),
    });
    expect((await oauth.processAuthorizationCodeResponse(as, client, good.res)).access_token).toBeTruthy();
    const bad = await codeFlow(as, user, { client, clientAuth: oauth.ClientSecretBasic('scs_wrong') });
    expect(bad.res.status).toBe(401);
    expect(bad.res.headers.get('www-authenticate')).toMatch(/^Basic/);
    expect(await json(bad.res)).toMatchObject({ error: 'invalid_client' });
    const missing = await codeFlow(as, user, { client, clientAuth: oauth.None() });
    expect(missing.res.status).toBe(401);
  });
});

describe('refresh, revocation, introspection', () => {
  async function approved(origin = server.v2Url) {
    const as = await discover(origin);
    const client = { client_id: 'svc-cli' };
    const user = await createUser(server);
    const { res } = await codeFlow(as, user, { client, clientAuth: oauth.None() });
    const body = await oauth.processAuthorizationCodeResponse(as, client, res);
    return { as, client, user, body, grants: body.grants as Grant[] };
  }

  it('rotates the refresh token on every use and keeps the grant', async () => {
    const { as, client, body } = await approved();
    const r1 = await oauth.processRefreshTokenResponse(
      as,
      client,
      await oauth.refreshTokenGrantRequest(as, client, oauth.None(), body.refresh_token!, insecure),
    );
    expect(r1.refresh_token).toMatch(/^srt_/);
    expect(r1.refresh_token).not.toBe(body.refresh_token);
    expect(r1.scope).toBe('platform');
    expect((r1.grants as Grant[]).length).toBe(1);
    const r2 = await oauth.processRefreshTokenResponse(
      as,
      client,
      await oauth.refreshTokenGrantRequest(as, client, oauth.None(), r1.refresh_token!, insecure),
    );
    expect(r2.refresh_token).not.toBe(r1.refresh_token);
    expect(
      (await verifyAccessToken(server.deps, r2.access_token, { resource: 'platform', origin: server.v2Url }))
        .resource,
    ).toBe('platform');
  });

  it('refuses a refresh token at another issuer and another resource', async () => {
    const { client, body } = await approved();
    const light = await discover(server.lightUrl);
    const res = await oauth.refreshTokenGrantRequest(
      light,
      client,
      oauth.None(),
      body.refresh_token!,
      insecure,
    );
    expect(res.status).toBe(400);
    expect((await json(res)).error).toBe('invalid_grant');
    const as = await discover(server.v2Url);
    const target = await oauth.refreshTokenGrantRequest(as, client, oauth.None(), body.refresh_token!, {
      ...insecure,
      additionalParameters: { resource: `${server.v2Url}/v1` },
    });
    expect((await json(target)).error).toBe('invalid_target');
  });

  it('revokes one grant by its refresh token and leaves the other working', async () => {
    const { as, client, grants } = await approved();
    const platform = grants.find((g) => g.scope === 'platform')!;
    const model = grants.find((g) => g.scope === 'model account')!; // svc-cli's default (CONTRACT §7)
    await oauth.processRevocationResponse(
      await oauth.revocationRequest(as, client, oauth.None(), platform.refresh_token, insecure),
    );
    await expect(
      verifyAccessToken(server.deps, platform.access_token, { resource: 'platform', origin: server.v2Url }),
    ).rejects.toMatchObject({ status: 401 });
    expect(
      (await verifyAccessToken(server.deps, model.access_token, { resource: 'model', origin: server.v2Url }))
        .resource,
    ).toBe('model');
    const again = await oauth.refreshTokenGrantRequest(
      as,
      client,
      oauth.None(),
      platform.refresh_token,
      insecure,
    );
    expect(again.status).toBe(400);
    // Revoking by access token works too (the grant behind it).
    await oauth.processRevocationResponse(
      await oauth.revocationRequest(as, client, oauth.None(), model.access_token, insecure),
    );
    await expect(
      verifyAccessToken(server.deps, model.access_token, { resource: 'model', origin: server.v2Url }),
    ).rejects.toMatchObject({ status: 401 });
    // Unknown tokens: 200, nothing revealed (RFC 7009 §2.2).
    expect((await oauth.revocationRequest(as, client, oauth.None(), 'srt_nonsense', insecure)).status).toBe(
      200,
    );
  });

  it('does not let one client revoke or introspect another client’s tokens', async () => {
    const { as, grants } = await approved();
    const other = await register(as, { redirect_uris: [REDIRECT], token_endpoint_auth_method: 'none' });
    const otherClient = { client_id: other.client_id };
    const platform = grants.find((g) => g.scope === 'platform')!;
    expect(
      (await oauth.revocationRequest(as, otherClient, oauth.None(), platform.refresh_token, insecure)).status,
    ).toBe(200);
    expect(
      (
        await verifyAccessToken(server.deps, platform.access_token, {
          resource: 'platform',
          origin: server.v2Url,
        })
      ).resource,
    ).toBe('platform');
    const intro = await oauth.processIntrospectionResponse(
      as,
      otherClient,
      await oauth.introspectionRequest(as, otherClient, oauth.None(), platform.access_token, insecure),
    );
    expect(intro.active).toBe(false);
  });

  it('introspects access and refresh tokens (active, then inactive after revocation)', async () => {
    const { as, client, user, grants } = await approved();
    const model = grants.find((g) => g.scope === 'model account')!; // svc-cli's default (CONTRACT §7)
    const at = await oauth.processIntrospectionResponse(
      as,
      client,
      await oauth.introspectionRequest(as, client, oauth.None(), model.access_token, insecure),
    );
    expect(at).toMatchObject({
      active: true,
      scope: 'model account',
      client_id: 'svc-cli',
      sub: user.userId,
      aud: `${server.v2Url}/v1`,
      iss: server.v2Url,
      token_type: 'Bearer',
    });
    const rt = await oauth.processIntrospectionResponse(
      as,
      client,
      await oauth.introspectionRequest(as, client, oauth.None(), model.refresh_token, insecure),
    );
    expect(rt).toMatchObject({ active: true, scope: 'model account', token_type: 'refresh_token' });
    await oauth.revocationRequest(as, client, oauth.None(), model.refresh_token, insecure);
    const after = await oauth.processIntrospectionResponse(
      as,
      client,
      await oauth.introspectionRequest(as, client, oauth.None(), model.access_token, insecure),
    );
    expect(after).toEqual({ active: false });
    const junk = await oauth.processIntrospectionResponse(
      as,
      client,
      await oauth.introspectionRequest(as, client, oauth.None(), 'garbage', insecure),
    );
    expect(junk).toEqual({ active: false });
  });

  it('requires client authentication at introspection (401 invalid_client)', async () => {
    const res = await fetch(`${server.v2Url}/oauth/introspect`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'token=abc',
    });
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toMatch(/^Basic/);
    expect(await json(res)).toMatchObject({ error: 'invalid_client' });
  });
});

describe('browser-based clients (CORS, no credentials)', () => {
  it('answers preflights on the client endpoints and allows any origin without cookies', async () => {
    for (const path of [
      '/oauth/token',
      '/oauth/register',
      '/oauth/revoke',
      '/oauth/introspect',
      '/oauth/device_authorization',
    ]) {
      const pre = await fetch(`${server.v2Url}${path}`, {
        method: 'OPTIONS',
        headers: {
          origin: 'https://inspector.example',
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'content-type',
        },
      });
      expect(pre.status).toBe(204);
      expect(pre.headers.get('access-control-allow-origin')).toBe('*');
      expect(pre.headers.get('access-control-allow-credentials')).toBeNull();
    }
    const authorize = await fetch(`${server.v2Url}/oauth/authorize`, { method: 'OPTIONS' });
    expect(authorize.headers.get('access-control-allow-origin')).toBeNull();
  });
});

describe('dynamic client registration (RFC 7591)', () => {
  it('answers 201 and validates redirect URIs', async () => {
    const post = (body: unknown) =>
      fetch(`${server.v2Url}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const ok = await post({
      redirect_uris: ['https://app.example/cb', 'com.example.app:/cb'],
      token_endpoint_auth_method: 'none',
    });
    expect(ok.status).toBe(201);
    expect(ok.headers.get('cache-control')).toBe('no-store');
    const body = await json(ok);
    expect(body).toMatchObject({
      token_endpoint_auth_method: 'none',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
    });
    expect(body.client_secret).toBeUndefined();
    for (const bad of [
      ['http://evil.example/cb'],
      ['https://app.example/cb#frag'],
      ['javascript:alert(1)'],
      [],
    ]) {
      const res = await post({ redirect_uris: bad });
      expect(res.status).toBe(400);
      expect((await json(res)).error).toBe('invalid_redirect_uri');
    }
    const method = await post({
      redirect_uris: ['https://a.example/cb'],
      token_endpoint_auth_method: 'private_key_jwt',
    });
    expect((await json(method)).error).toBe('invalid_client_metadata');
  });
});
