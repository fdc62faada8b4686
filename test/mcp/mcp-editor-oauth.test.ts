import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  auth,
  Client,
  StreamableHTTPClientTransport,
  UnauthorizedError,
  type OAuthClientProvider,
} from '@modelcontextprotocol/client';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { driveConsent } from '../helpers/oauth.js';
import { verifyAccessToken } from '../../oauth/verify.js';

// An editor in the way Claude Code connects (the MCP SDK v2 client's Streamable HTTP transport with an
// OAuth provider, and nothing else): the 401 sends it to the protected-resource metadata and on to the
// authorization server; it registers itself, asks for `platform:read` (its read-only mode), and the person consents. It then
// lists and calls tools; when its access token stops working it refreshes on its own; when it calls a
// tool that writes, the 403 insufficient_scope naming `platform` makes it authorize again for that
// scope (step-up), and the call goes through after the person consents (CONTRACT §10).

type Provider = OAuthClientProvider & {
  saved: Awaited<ReturnType<OAuthClientProvider['tokens']>>;
  authorizationUrls: URL[];
  refreshes: number;
};

const REDIRECT = 'http://127.0.0.1:9/editor-callback';

/** The editor's credential store, in memory; it counts the refresh grants it sees go out. */
function editorProvider(): Provider {
  let info: Awaited<ReturnType<OAuthClientProvider['clientInformation']>>;
  let verifier = '';
  const provider: Provider = {
    saved: undefined,
    authorizationUrls: [],
    refreshes: 0,
    get redirectUrl() {
      return REDIRECT;
    },
    get clientMetadata() {
      return {
        client_name: 'Claude-Code-style editor',
        redirect_uris: [REDIRECT],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        scope: 'platform:read',
      };
    },
    clientInformation: () => info,
    saveClientInformation: (next) => {
      info = next;
    },
    tokens: () => provider.saved,
    saveTokens: (tokens) => {
      provider.saved = tokens;
    },
    redirectToAuthorization: (url) => {
      provider.authorizationUrls.push(url);
    },
    saveCodeVerifier: (v) => {
      verifier = v;
    },
    codeVerifier: () => verifier,
  };
  return provider;
}

let server: TestServer;
let user: TestUser;
beforeAll(async () => {
  // The SDK v2 client sends credentials over plain http only to localhost, 127.0.0.1 or ::1: the
  // platform origin (V2_URL) is http://127.0.0.1 here (the account API moves to 127.0.0.2).
  server = await startTestServer({
    env: (port) => ({ BASE_URL: `http://127.0.0.2:${port}`, V2_URL: `http://127.0.0.1:${port}` }),
  });
  user = await createUser(server);
});
afterAll(async () => {
  await server?.close();
});

/** The person's part: consent on the page the editor opened; the callback's parameters (code, iss, state). */
async function consent(url: URL): Promise<URLSearchParams> {
  const result = await driveConsent(url.href, user.session);
  expect(result.postStatus).toBe(303);
  const back = new URL(result.location!).searchParams;
  expect(back.get('iss')).toBe(server.v2Url);
  return back;
}

describe('an editor that discovers, registers, refreshes and steps up (SDK v2 client)', () => {
  it('goes from 401 to read-only tools, refreshes by itself, and steps up to platform for a write', async () => {
    const endpoint = new URL('/mcp/platform', server.v2Url);
    const provider = editorProvider();
    // Count the refresh grants the editor sends, as the transport's fetch sees them.
    const fetchFn: typeof fetch = async (input, init) => {
      const url = input instanceof Request ? input.url : input instanceof URL ? input.href : input;
      const body = init?.body instanceof URLSearchParams ? init.body.toString() : init?.body;
      if (
        url.endsWith('/oauth/token') &&
        typeof body === 'string' &&
        body.includes('grant_type=refresh_token')
      )
        provider.refreshes++;
      return fetch(input, init);
    };
    const transport = new StreamableHTTPClientTransport(endpoint, { authProvider: provider, fetch: fetchFn });
    const editor = new Client({ name: 'claude-code-style', version: '1.0.0' });

    // Discovery and registration from the 401 alone. Asked for nothing in particular, the SDK asks for
    // the scopes the protected-resource metadata lists, which grant the full platform scope.
    await expect(editor.connect(transport)).rejects.toBeInstanceOf(UnauthorizedError);
    const first = provider.authorizationUrls[0]!;
    expect(first.origin + first.pathname).toBe(`${server.v2Url}/oauth/authorize`);
    expect(first.searchParams.get('client_id')).toMatch(/^dcr_/);
    expect(first.searchParams.get('resource')).toBe(endpoint.href);
    expect(first.searchParams.get('scope')?.split(' ').sort()).toEqual(['platform', 'platform:read']);
    const clientId = first.searchParams.get('client_id');

    // The editor's read-only mode asks for platform:read instead, with the client it registered.
    expect(await auth(provider, { serverUrl: endpoint, scope: 'platform:read', fetchFn })).toBe('REDIRECT');
    const readOnly = provider.authorizationUrls[1]!;
    expect(readOnly.searchParams.get('client_id')).toBe(clientId);
    expect(readOnly.searchParams.get('scope')).toBe('platform:read');
    await transport.finishAuth(await consent(readOnly));
    expect(provider.saved?.scope).toBe('platform:read');

    // A new connection, as an editor makes after its sign-in (the refused one is spent).
    const signedIn = new StreamableHTTPClientTransport(endpoint, { authProvider: provider, fetch: fetchFn });
    await editor.connect(signedIn);
    const { tools } = await editor.listTools();
    expect(tools.length).toBeGreaterThan(0);
    expect(tools.every((t) => t.annotations?.readOnlyHint === true)).toBe(true);
    expect((await editor.callTool({ name: 'list_projects', arguments: {} })).isError).toBeFalsy();

    // The access token stops being accepted: the transport refreshes with the stored refresh token and
    // the call goes through, with no new authorization.
    const before = provider.saved!;
    provider.saved = { ...before, access_token: 'no-longer-valid' };
    expect((await editor.callTool({ name: 'list_projects', arguments: {} })).isError).toBeFalsy();
    expect(provider.refreshes).toBe(1);
    expect(provider.authorizationUrls).toHaveLength(2);
    expect(provider.saved.refresh_token).not.toBe(before.refresh_token);
    expect(provider.saved.scope).toBe('platform:read');

    // A tool that writes: 403 insufficient_scope naming platform; the transport authorizes again for it.
    await expect(
      editor.callTool({ name: 'create_project', arguments: { name: 'after step-up' } }),
    ).rejects.toBeInstanceOf(UnauthorizedError);
    expect(provider.authorizationUrls).toHaveLength(3);
    const stepUp = provider.authorizationUrls[2]!;
    expect(stepUp.searchParams.get('scope')?.split(' ')).toContain('platform');
    await signedIn.finishAuth(await consent(stepUp));
    expect(provider.saved.scope?.split(' ')).toContain('platform');
    const created = await editor.callTool({ name: 'create_project', arguments: { name: 'after step-up' } });
    expect(created.isError).toBeFalsy();
    expect(created.structuredContent).toMatchObject({ name: 'after step-up', org_id: user.clientId });
    const access = await verifyAccessToken(server.deps, provider.saved.access_token, {
      resource: 'platform',
      origin: server.v2Url,
    });
    expect(access.userId).toBe(user.userId);
    await editor.close();
  }, 90_000);
});
