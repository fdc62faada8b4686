import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as oauth from 'oauth4webapi';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createUser, type TestUser } from '../helpers/fixtures.js';
import {
  discoverAuthorizationServer,
  driveConsent,
  insecureRequests,
  registerPublicClient,
} from '../helpers/oauth.js';
import { PageClient, csrfOf } from '../helpers/page-client.js';
import { jsonAs, type JsonObject } from '../helpers/json.js';

// The organization boundary of third-party grants (CONTRACT §7), and device codes
// bound to their origin (item 12). Real HTTP with oauth4webapi as the app, the MCP SDK client on
// /mcp/platform, the model routes with x-svc-organisation; V2 and LIGHT are distinct hosts.
//
// Ada belongs to her own organization A and, as a member, to Bo's organization B.

let server: TestServer;
let ada: TestUser;
let bo: TestUser;
const insecure = insecureRequests;
const REDIRECT = 'http://127.0.0.1:9/callback';
const json = (res: Response) => jsonAs<JsonObject>(res);

beforeAll(async () => {
  server = await startTestServer();
  [ada, bo] = await Promise.all([createUser(server), createUser(server)]);
  await addMember(server, bo.orgKey, ada.userId, 'member');
});
afterAll(async () => {
  await server?.close();
});

const discover = discoverAuthorizationServer;

const registerApp = (as: oauth.AuthorizationServer, grantTypes?: string[]): Promise<oauth.Client> =>
  registerPublicClient(as, {
    redirect_uris: [REDIRECT],
    client_name: 'Notes app',
    ...(grantTypes ? { grant_types: grantTypes } : {}),
  });

/** Code flow with consent for organization A; returns both grants' access tokens. */
async function approveFor(client: oauth.Client, opts: { allOrganizations?: boolean } = {}) {
  const as = await discover(server.v2Url);
  const verifier = oauth.generateRandomCodeVerifier();
  const url = new URL(as.authorization_endpoint!);
  url.searchParams.set('client_id', client.client_id);
  url.searchParams.set('redirect_uri', REDIRECT);
  url.searchParams.set('response_type', 'code');
  url.searchParams.set('code_challenge', await oauth.calculatePKCECodeChallenge(verifier));
  url.searchParams.set('code_challenge_method', 'S256');
  const consent = await driveConsent(url.href, ada.session, { org: ada.clientId, ...opts });
  expect(consent.postStatus).toBe(303);
  const params = oauth.validateAuthResponse(as, client, new URL(consent.location!), oauth.skipStateCheck);
  const tokens = await oauth.processAuthorizationCodeResponse(
    as,
    client,
    await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), params, REDIRECT, verifier, insecure),
  );
  const grants = tokens.grants as { resource: string; access_token: string }[];
  return {
    page: consent.page,
    platform: grants.find((g) => g.resource.endsWith('/mcp/platform'))!.access_token,
    model: grants.find((g) => g.resource.endsWith('/v1'))!.access_token,
  };
}

async function mcpClient(origin: string, token: string, headers: Record<string, string> = {}) {
  const c = new Client({ name: 'boundary-test', version: '1.0.0' });
  await c.connect(
    new StreamableHTTPClientTransport(new URL('/mcp/platform', origin), {
      requestInit: { headers: { authorization: `Bearer ${token}`, ...headers } },
    }),
  );
  return c;
}

async function listProjects(c: Client, orgId: string): Promise<CallToolResult> {
  return (await c.callTool({ name: 'list_projects', arguments: { org_id: orgId } })) as CallToolResult;
}

const modelsAs = (token: string, org: string) =>
  fetch(`${server.v2Url}/v1/models`, {
    headers: { authorization: `Bearer ${token}`, 'x-svc-organisation': org },
  });

describe('third-party grants stay in the organization chosen (item 11)', () => {
  it('unticked: the consent page says so; org_id and x-svc-organisation of another organization are refused', async () => {
    const client = await registerApp(await discover(server.v2Url));
    const granted = await approveFor(client);
    expect(granted.page).toContain('name="all_organizations"');
    expect(granted.page).toContain('acts only in the organization chosen above');

    const mcp = await mcpClient(server.v2Url, granted.platform);
    expect((await listProjects(mcp, ada.clientId)).isError).toBeFalsy();
    const other = await listProjects(mcp, bo.clientId);
    expect(other.isError).toBe(true);
    expect((other.content[0] as { text: string }).text).toMatch(/^NO_ACCESS/);
    await mcp.close();

    const named = await fetch(`${server.v2Url}/mcp/platform`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${granted.platform}`,
        'x-svc-organisation': bo.clientId,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(named.status).toBe(403);

    expect((await modelsAs(granted.model, ada.orgId)).status).toBe(200);
    const billB = await modelsAs(granted.model, bo.orgId);
    expect(billB.status).toBe(403);
    expect(JSON.stringify(await json(billB))).toMatch(/NO_ACCESS|no_access/);
  });

  it('ticked "all my organizations": the same grant acts in every membership', async () => {
    const client = await registerApp(await discover(server.v2Url));
    const granted = await approveFor(client, { allOrganizations: true });
    const mcp = await mcpClient(server.v2Url, granted.platform, { 'x-svc-organisation': bo.clientId });
    expect((await listProjects(mcp, bo.clientId)).isError).toBeFalsy();
    await mcp.close();
    expect((await modelsAs(granted.model, bo.orgId)).status).toBe(200);
  });

  it('svc-cli acts in every membership and is offered no checkbox', async () => {
    const cli = { client_id: 'svc-cli' };
    const granted = await approveFor(cli);
    expect(granted.page).not.toContain('name="all_organizations"');
    expect((await modelsAs(granted.model, bo.orgId)).status).toBe(200);
  });
});

describe('device codes are bound to their origin (item 12) and to the organization boundary', () => {
  it('a code issued and approved at LIGHT is invalid_grant at V2, and redeems at LIGHT bound to the chosen org', async () => {
    const light = await discover(server.lightUrl);
    const v2 = await discover(server.v2Url);
    const client = await registerApp(light, [
      'authorization_code',
      'refresh_token',
      'urn:ietf:params:oauth:grant-type:device_code',
    ]);
    const da = await oauth.processDeviceAuthorizationResponse(
      light,
      client,
      await oauth.deviceAuthorizationRequest(light, client, oauth.None(), {}, insecure),
    );
    expect(da.verification_uri).toBe(`${server.lightUrl}/account/device`);

    // Ada approves on LIGHT's device page (signed in there), organization A, box unticked.
    const browser = new PageClient(server.lightUrl);
    browser.jar.set('__Host-svc_session', ada.session);
    const page = await browser.get(`/account/device?user_code=${encodeURIComponent(da.user_code)}`);
    expect(page.status).toBe(200);
    expect(page.text).toContain('name="all_organizations"');
    const done = await browser.post('/account/device', {
      csrf_token: csrfOf(page.text),
      user_code: da.user_code,
      client_id: ada.clientId,
      decision: 'approve',
    });
    expect(done.location).toBe(`${server.lightUrl}/account/device?done=approved`);

    const atV2 = await oauth.deviceCodeGrantRequest(v2, client, oauth.None(), da.device_code, insecure);
    await expect(oauth.processDeviceCodeResponse(v2, client, atV2)).rejects.toMatchObject({
      error: 'invalid_grant',
    });
    // The refused poll consumed nothing: the right origin still redeems it, for its own resources.
    const tokens = await oauth.processDeviceCodeResponse(
      light,
      client,
      await oauth.deviceCodeGrantRequest(light, client, oauth.None(), da.device_code, insecure),
    );
    const grants = tokens.grants as { resource: string; access_token: string }[];
    expect(grants.map((g) => g.resource).sort()).toEqual([
      `${server.lightUrl}/mcp/platform`,
      `${server.lightUrl}/v1`,
    ]);
    const model = grants.find((g) => g.resource.endsWith('/v1'))!.access_token;
    const asB = await fetch(`${server.lightUrl}/v1/models`, {
      headers: { authorization: `Bearer ${model}`, 'x-svc-organisation': bo.orgId },
    });
    expect(asB.status).toBe(403);
  });
});
