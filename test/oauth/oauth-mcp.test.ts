import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  auth,
  extractWWWAuthenticateParams,
  type OAuthClientProvider,
} from '@modelcontextprotocol/sdk/client/auth.js';
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from '@modelcontextprotocol/sdk/shared/auth.js';
import { startTestServer, type TestServer, PRODUCTION_ENV } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { driveConsent, sessionCookie } from '../helpers/oauth.js';
import { verifyAccessToken } from '../../oauth/verify.js';
import { isForbiddenAddress } from '../../oauth/client-metadata.js';

// The MCP SDK's own client auth flow (`auth()` with an OAuthClientProvider) against our server for the
// /mcp/platform resource: once with dynamic registration and once with a client ID metadata document
// (served here over http://127.0.0.1, which DEV_MODE allows), the consent step done by a signed-in user.

let server: TestServer;
let user: TestUser;
let docServer: Server;
let docBase: string;
const documents = new Map<string, { status?: number; body: string }>();

beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
  docServer = createServer((req, res) => {
    const doc = documents.get(req.url ?? '');
    res.writeHead(doc?.status ?? (doc ? 200 : 404), { 'content-type': 'application/json' });
    res.end(doc?.body ?? '{}');
  });
  await new Promise<void>((resolve) => docServer.listen(0, '127.0.0.1', resolve));
  docBase = `http://127.0.0.1:${(docServer.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => docServer?.close(resolve));
  await server?.close();
});

const REDIRECT = 'http://127.0.0.1:47001/callback';

class TestProvider implements OAuthClientProvider {
  info: OAuthClientInformationMixed | undefined;
  saved: OAuthTokens | undefined;
  verifier = '';
  code: string | undefined;
  constructor(
    preset?: OAuthClientInformationMixed,
    readonly consentOrg?: string,
  ) {
    this.info = preset;
  }
  get redirectUrl() {
    return REDIRECT;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: 'MCP SDK test client',
      redirect_uris: [REDIRECT],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
  state() {
    return 'mcp-state';
  }
  clientInformation() {
    return this.info;
  }
  saveClientInformation(info: OAuthClientInformationMixed) {
    this.info = info;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(tokens: OAuthTokens) {
    this.saved = tokens;
  }
  /** The consent pages the "browser" was shown. */
  pages: string[] = [];
  async redirectToAuthorization(url: URL) {
    // The "browser": the signed-in user approves on the consent page; the code comes back on the redirect.
    const result = await driveConsent(url.href, user.session, { org: this.consentOrg });
    this.pages.push(result.page);
    const back = new URL(result.location!);
    expect(back.searchParams.get('iss')).toBe(server.v2Url);
    expect(back.searchParams.get('state')).toBe('mcp-state');
    this.code = back.searchParams.get('code') ?? undefined;
  }
  saveCodeVerifier(v: string) {
    this.verifier = v;
  }
  codeVerifier() {
    return this.verifier;
  }
}

async function completeFlow(provider: TestProvider) {
  const serverUrl = `${server.v2Url}/mcp/platform`;
  expect(await auth(provider, { serverUrl })).toBe('REDIRECT');
  expect(provider.code).toBeTruthy();
  expect(await auth(provider, { serverUrl, authorizationCode: provider.code! })).toBe('AUTHORIZED');
  const tokens = provider.saved!;
  const access = await verifyAccessToken(server.deps, tokens.access_token, {
    resource: 'platform',
    origin: server.v2Url,
  });
  expect(access.userId).toBe(user.userId);
  return { tokens, access };
}

describe('MCP SDK auth() for /mcp/platform', () => {
  it('completes with dynamic client registration', async () => {
    const provider = new TestProvider();
    const { tokens, access } = await completeFlow(provider);
    expect(provider.info?.client_id).toMatch(/^dcr_/);
    expect(access.clientId).toBe(provider.info!.client_id);
    expect(tokens.scope).toBe('platform');
    // The SDK refreshes with the rotated refresh token on its own.
    provider.saved = { ...tokens, access_token: 'expired' };
    expect(await auth(provider, { serverUrl: `${server.v2Url}/mcp/platform` })).toBe('AUTHORIZED');
    expect(provider.saved.refresh_token).not.toBe(tokens.refresh_token);
  });

  it('completes with a client ID metadata document URL as client_id, and shows its host on the consent page', async () => {
    const clientId = `${docBase}/clients/editor.json`;
    documents.set('/clients/editor.json', {
      body: JSON.stringify({
        client_id: clientId,
        client_name: 'Editor via metadata document',
        redirect_uris: [REDIRECT],
        token_endpoint_auth_method: 'none',
      }),
    });
    const provider = new TestProvider({ client_id: clientId });
    const { access } = await completeFlow(provider);
    expect(access.clientId).toBe(clientId);
    const page = await fetch(
      `${server.v2Url}/oauth/authorize?client_id=${encodeURIComponent(clientId)}&redirect_uri=${encodeURIComponent(REDIRECT)}&response_type=code&code_challenge=${'a'.repeat(43)}&code_challenge_method=S256`,
      { headers: { cookie: sessionCookie(user.session) } },
    );
    const text = await page.text();
    expect(text).toContain('Editor via metadata document');
    expect(text).toContain(`metadata document at <strong>${new URL(docBase).host}</strong>`);
  });
});

describe('platform:read and step-up (CONTRACT §10)', () => {
  const serverUrl = () => `${server.v2Url}/mcp/platform`;
  const callTool = (token: string, name: string, args: Record<string, unknown>) =>
    fetch(serverUrl(), {
      method: 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name, arguments: args },
      }),
    });

  it('grants read only when asked, says so on the consent page, and steps up to platform on a 403', async () => {
    const provider = new TestProvider();
    expect(await auth(provider, { serverUrl: serverUrl(), scope: 'platform:read' })).toBe('REDIRECT');
    expect(provider.pages[0]).toContain('Platform tools, read only');
    expect(await auth(provider, { serverUrl: serverUrl(), authorizationCode: provider.code! })).toBe(
      'AUTHORIZED',
    );
    expect(provider.saved!.scope).toBe('platform:read');
    const read = provider.saved!.access_token;
    expect((await callTool(read, 'list_projects', {})).status).toBe(200);

    // A tool that writes: 403 naming the scope to ask for, which the client asks for in a new authorization.
    const refused = await callTool(read, 'create_project', { name: 'needs platform' });
    expect(refused.status).toBe(403);
    const { scope, resourceMetadataUrl } = extractWWWAuthenticateParams(refused);
    expect(scope).toBe('platform');
    // A refresh would only renew the read-only grant: the client authorizes again for the scope named.
    provider.saved = undefined;
    expect(await auth(provider, { serverUrl: serverUrl(), scope, resourceMetadataUrl })).toBe('REDIRECT');
    expect(provider.pages[1]).not.toContain('read only');
    expect(await auth(provider, { serverUrl: serverUrl(), authorizationCode: provider.code! })).toBe(
      'AUTHORIZED',
    );
    expect(provider.saved!.scope).toBe('platform');
    const created = await callTool(provider.saved!.access_token, 'create_project', { name: 'after step-up' });
    expect(created.status).toBe(200);
    expect(await created.text()).toContain('after step-up');
    // The read-only grant is its own: it still verifies, with its scope.
    const introspected = await verifyAccessToken(server.deps, read, {
      resource: 'platform',
      origin: server.v2Url,
    });
    expect(introspected.scope).toBe('platform:read');
  });

  it('names read only on the device page of a platform:read device request', async () => {
    const started = await fetch(`${server.v2Url}/oauth/device_authorization`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        client_id: 'svc-cli',
        resource: serverUrl(),
        scope: 'platform:read',
      }).toString(),
    });
    expect(started.status).toBe(200);
    const { user_code } = (await started.json()) as { user_code: string };
    const page = await fetch(`${server.v2Url}/account/device?user_code=${encodeURIComponent(user_code)}`, {
      headers: { cookie: sessionCookie(user.session) },
    });
    expect(await page.text()).toContain('Platform tools, read only');
  });
});

describe('client ID metadata documents: validation and SSRF guard', () => {
  async function consentStatus(clientId: string, redirect = REDIRECT) {
    const url = `${server.v2Url}/oauth/authorize?client_id=${encodeURIComponent(clientId)}&redirect_uri=${encodeURIComponent(redirect)}&response_type=code&code_challenge=${'a'.repeat(43)}&code_challenge_method=S256`;
    const res = await fetch(url, { headers: { cookie: sessionCookie(user.session) }, redirect: 'manual' });
    await res.text();
    return res.status;
  }

  it('refuses a document that names another client_id, is too large, or is not JSON', async () => {
    documents.set('/wrong.json', {
      body: JSON.stringify({ client_id: 'https://other.example/doc.json', redirect_uris: [REDIRECT] }),
    });
    expect(await consentStatus(`${docBase}/wrong.json`)).toBe(400);
    documents.set('/big.json', {
      body: JSON.stringify({
        client_id: `${docBase}/big.json`,
        redirect_uris: [REDIRECT],
        pad: 'x'.repeat(70_000),
      }),
    });
    expect(await consentStatus(`${docBase}/big.json`)).toBe(400);
    documents.set('/html.json', { body: '<html>' });
    expect(await consentStatus(`${docBase}/html.json`)).toBe(400);
    documents.set('/secret.json', {
      body: JSON.stringify({
        client_id: `${docBase}/secret.json`,
        redirect_uris: [REDIRECT],
        client_secret: 'x',
      }),
    });
    expect(await consentStatus(`${docBase}/secret.json`)).toBe(400);
    expect(await consentStatus(`${docBase}/missing.json`)).toBe(400);
  });

  it('never fetches private, loopback or link-local addresses over https', async () => {
    for (const target of [
      'https://127.0.0.1/doc.json',
      'https://10.1.2.3/doc.json',
      'https://169.254.169.254/latest',
      'https://[::1]/doc.json',
      'https://localhost/doc.json',
    ]) {
      expect(await consentStatus(target)).toBe(400);
    }
    for (const addr of [
      '127.0.0.1',
      '10.0.0.1',
      '172.16.5.4',
      '192.168.1.1',
      '169.254.169.254',
      '::1',
      'fe80::1',
      'fd00::1',
      '::ffff:10.0.0.1',
      '0.0.0.0',
    ])
      expect(isForbiddenAddress(addr)).toBe(true);
    for (const addr of ['93.184.216.34', '2606:4700::1111']) expect(isForbiddenAddress(addr)).toBe(false);
  });

  it('does not accept http client_id URLs outside DEV_MODE', async () => {
    const prod = await startTestServer({ env: PRODUCTION_ENV });
    try {
      const clientId = `${docBase}/clients/editor.json`;
      const res = await fetch(
        `${prod.v2Url}/oauth/authorize?client_id=${encodeURIComponent(clientId)}&redirect_uri=${encodeURIComponent(REDIRECT)}&response_type=code&code_challenge=${'a'.repeat(43)}&code_challenge_method=S256`,
        { redirect: 'manual' },
      );
      expect(res.status).toBe(400);
    } finally {
      await prod.close();
    }
  });
});
