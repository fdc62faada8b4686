import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as oauth from 'oauth4webapi';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createUser, type TestUser } from '../helpers/fixtures.js';
import {
  discoverAuthorizationServer,
  driveConsent,
  insecureRequests,
  registerPublicClient,
} from '../helpers/oauth.js';
import { approveOnDevicePage } from '../helpers/cli.js';
import { PageClient } from '../helpers/page-client.js';
import { setOrgBalance } from '../helpers/billing.js';
import { jsonAs, type JsonObject } from '../helpers/json.js';

// Scope `account` (CONTRACT §7) through oauth4webapi, a strict independent client, over real HTTP: the
// built-in svc-cli gets it by default and its grant READS /v1/auth/verify, /v1/clients, the owner's pool,
// the billing and usage GETs under the caller's role rules; nothing that writes takes a grant; another
// client gets it only when it asks, the consent page naming it; without it those routes answer 403
// insufficient_scope with the challenge naming `account`.

let server: TestServer;
let owner: TestUser;
let other: TestUser;
let as: oauth.AuthorizationServer;

beforeAll(async () => {
  server = await startTestServer();
  owner = await createUser(server);
  other = await createUser(server);
  // The owner is a viewer in another organization: billing reads there are refused (CONTRACT §8).
  await addMember(server, other.orgKey, owner.userId, 'viewer');
  await setOrgBalance(server, owner.orgKey, 1234);
  as = await discoverAuthorizationServer(server.url);
});
afterAll(async () => {
  await server?.close();
});

const REDIRECT = 'http://127.0.0.1:9/callback';
const json = (res: Response) => jsonAs<JsonObject>(res);
const get = (path: string, token: string) =>
  fetch(`${server.url}${path}`, { headers: { authorization: `Bearer ${token}` } });

type Grants = { resource: string; scope: string; access_token: string }[];
const grantOf = (tokens: oauth.TokenEndpointResponse, resource: 'model' | 'platform') =>
  (tokens.grants as Grants).find((g) => g.resource.endsWith(resource === 'model' ? '/v1' : '/mcp/platform'))!;

/** svc-cli's device grant: the person approves the user code on the device page. */
async function cliDeviceGrant(user: TestUser) {
  const client: oauth.Client = { client_id: 'svc-cli' };
  const code = await oauth.processDeviceAuthorizationResponse(
    as,
    client,
    await oauth.deviceAuthorizationRequest(as, client, oauth.None(), {}, insecureRequests),
  );
  const browser = new PageClient(server.v2Url);
  browser.jar.set('__Host-svc_session', user.session);
  const page = await browser.get(`/account/device?user_code=${encodeURIComponent(code.user_code)}`);
  await approveOnDevicePage(server.v2Url, user, code.user_code);
  const tokens = await oauth.processDeviceCodeResponse(
    as,
    client,
    await oauth.deviceCodeGrantRequest(as, client, oauth.None(), code.device_code, insecureRequests),
  );
  return { tokens, devicePage: page.text };
}

/** A registered client's code flow, asking for `scope` (none: the parameter is left out). */
async function registeredCodeFlow(user: TestUser, scope?: string) {
  const client = await registerPublicClient(as, { redirect_uris: [REDIRECT], client_name: 'Reporter' });
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const url = new URL(as.authorization_endpoint!);
  url.search = new URLSearchParams({
    client_id: client.client_id,
    redirect_uri: REDIRECT,
    response_type: 'code',
    state,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
    ...(scope ? { scope } : {}),
  }).toString();
  const consent = await driveConsent(url.href, user.session, { org: user.orgId });
  expect(consent.postStatus).toBe(303);
  const params = oauth.validateAuthResponse(as, client, new URL(consent.location!), state);
  const tokens = await oauth.processAuthorizationCodeResponse(
    as,
    client,
    await oauth.authorizationCodeGrantRequest(
      as,
      client,
      oauth.None(),
      params,
      REDIRECT,
      verifier,
      insecureRequests,
    ),
  );
  return { tokens, consentPage: consent.page };
}

describe('OAuth scope account', () => {
  it('is listed in the metadata, beside model on the /v1 resource', async () => {
    expect(as.scopes_supported).toContain('account');
    const prm = await json(await fetch(`${server.url}/.well-known/oauth-protected-resource/v1`));
    expect(prm.scopes_supported).toEqual(['model', 'account']);
  });

  it('svc-cli gets it by default; its grant reads the account routes and writes nothing', async () => {
    const { tokens, devicePage } = await cliDeviceGrant(owner);
    expect(devicePage).toContain('Read your organizations, balances and usage');
    const model = grantOf(tokens, 'model');
    expect(model.scope).toBe('model account');
    expect(grantOf(tokens, 'platform').scope).toBe('platform');
    const token = model.access_token;

    const verify = await get('/v1/auth/verify', token);
    expect(verify.status).toBe(200);
    expect(await json(verify)).toMatchObject({
      valid: true,
      client_id: owner.orgId,
      user_id: owner.userId,
      email: owner.email,
      token_id: null,
      role: 'owner',
      scopes: ['model', 'account'],
    });
    const clients = await json(await get('/v1/clients', token));
    expect(clients.data).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ id: owner.clientId, role: 'owner' }),
        expect.objectContaining({ id: other.clientId, role: 'viewer' }),
      ]),
    );
    expect((await get('/v1/owner/balance', token)).status).toBe(200);
    const balance = await get(`/v1/clients/${owner.clientId}/credits/balance`, token);
    expect(balance.status).toBe(200);
    expect((await json(balance)).balance_credits).toBe(1234);
    expect((await get(`/v1/clients/${owner.clientId}/credits/transactions`, token)).status).toBe(200);
    expect((await get(`/v1/clients/${owner.clientId}/usage`, token)).status).toBe(200);
    // The caller's role rules: a viewer does not read that organization's billing.
    const viewerRead = await get(`/v1/clients/${other.clientId}/credits/balance`, token);
    expect(viewerRead.status).toBe(403);

    // Nothing that writes takes a grant: CONTRACT §3's 401.
    const create = await fetch(`${server.url}/v1/clients`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Made by a grant' }),
    });
    expect(create.status).toBe(401);
    expect(await json(create)).toEqual({ detail: { code: 'INVALID_TOKEN', message: 'invalid token' } });
    const allocate = await fetch(`${server.url}/v1/owner/orgs/${owner.orgId}/allocation`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ target_credits: 1 }),
    });
    expect(allocate.status).toBe(401);
    // A route CONTRACT §7 does not name does not take a grant either; nor does the platform grant.
    expect((await get('/v1/tokens', token)).status).toBe(401);
    expect((await get('/v1/clients', grantOf(tokens, 'platform').access_token)).status).toBe(401);
    // The grant still calls models.
    expect((await get('/v1/models', token)).status).toBe(200);
  });

  it('a registered client without it: 403 insufficient_scope naming account; the page does not offer it', async () => {
    const { tokens, consentPage } = await registeredCodeFlow(owner);
    expect(consentPage).not.toContain('Read your organizations, balances and usage');
    const model = grantOf(tokens, 'model');
    expect(model.scope).toBe('model');
    for (const path of [
      '/v1/auth/verify',
      '/v1/clients',
      '/v1/owner/balance',
      `/v1/clients/${owner.clientId}/usage`,
    ]) {
      const res = await get(path, model.access_token);
      expect(res.status, path).toBe(403);
      expect(res.headers.get('www-authenticate')).toBe('Bearer error="insufficient_scope", scope="account"');
    }
    expect((await get('/v1/models', model.access_token)).status).toBe(200);
  });

  it('a registered client that asks gets it, named on the consent page, within its one organization', async () => {
    const { tokens, consentPage } = await registeredCodeFlow(owner, 'model account');
    expect(consentPage).toContain('Read your organizations, balances and usage');
    const model = grantOf(tokens, 'model');
    expect(model.scope).toBe('model account');
    expect(tokens.grants).toHaveLength(1); // the scope named the /v1 resource only
    const balance = await get(`/v1/clients/${owner.clientId}/credits/balance`, model.access_token);
    expect(balance.status).toBe(200);
    // Bound to the organization chosen at consent (CONTRACT §7): another one is refused.
    const elsewhere = await get(`/v1/clients/${other.clientId}/usage`, model.access_token);
    expect(elsewhere.status).toBe(403);
  });

  it('asked alone it reads the account routes but calls no model', async () => {
    const { tokens } = await registeredCodeFlow(owner, 'account');
    const model = grantOf(tokens, 'model');
    expect(model.scope).toBe('account');
    expect((await get('/v1/auth/verify', model.access_token)).status).toBe(200);
    const models = await get('/v1/models', model.access_token);
    expect(models.status).toBe(403);
    expect(models.headers.get('www-authenticate')).toContain('scope="model"');
  });
});
