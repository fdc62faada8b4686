import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError, type OAuthClientProvider } from '@modelcontextprotocol/sdk/client/auth.js';
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from '@modelcontextprotocol/sdk/shared/auth.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { driveConsent } from '../helpers/oauth.js';

// An MCP editor's whole sign-in, as the SDK does it (MCP Authorization 2025-06-18 / 2025-11-25):
// 401 with resource_metadata → protected-resource metadata (RFC 9728) → authorization-server metadata
// (RFC 8414) → dynamic registration (RFC 7591) → authorization code + PKCE with `resource` (RFC 8707)
// → consent by the signed-in user → token → tool calls that work. The authorization server's own rules
// are tested in test/oauth-*.test.ts; this proves the pieces meet at /mcp/platform.

const REDIRECT = 'http://127.0.0.1:9/mcp-callback';

/** An in-memory OAuthClientProvider, as an editor keeps it on disk. */
class EditorProvider implements OAuthClientProvider {
  info: OAuthClientInformationMixed | undefined;
  saved: OAuthTokens | undefined;
  verifier = '';
  authorizationUrl: URL | undefined;
  get redirectUrl() {
    return REDIRECT;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: 'Test Editor',
      redirect_uris: [REDIRECT],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
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
  redirectToAuthorization(url: URL) {
    this.authorizationUrl = url;
  }
  saveCodeVerifier(v: string) {
    this.verifier = v;
  }
  codeVerifier() {
    return this.verifier;
  }
}

let server: TestServer;
let user: TestUser;
beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
});
afterAll(async () => {
  await server?.close();
});

describe('editor sign-in through the MCP SDK', () => {
  it('goes from 401 to working tool calls', async () => {
    const endpoint = new URL('/mcp/platform', server.v2Url);
    const provider = new EditorProvider();
    const first = new StreamableHTTPClientTransport(endpoint, { authProvider: provider });
    const editor = new Client({ name: 'test-editor', version: '1.0.0' });
    await expect(editor.connect(first)).rejects.toBeInstanceOf(UnauthorizedError);

    // The SDK discovered, registered and built an authorization request for this resource, with PKCE.
    const url = provider.authorizationUrl!;
    expect(url.origin + url.pathname).toBe(`${server.v2Url}/oauth/authorize`);
    expect(url.searchParams.get('resource')).toBe(endpoint.href);
    expect(url.searchParams.get('code_challenge_method')).toBe('S256');
    expect(provider.info?.client_id).toBeTruthy();

    const consent = await driveConsent(url.href, user.session);
    expect(consent.postStatus).toBe(303);
    const code = new URL(consent.location!).searchParams.get('code')!;
    await first.finishAuth(code);
    expect(provider.saved?.access_token).toBeTruthy();

    const second = new StreamableHTTPClientTransport(endpoint, { authProvider: provider });
    const signedIn = new Client({ name: 'test-editor', version: '1.0.0' });
    await signedIn.connect(second);
    const created = (await signedIn.callTool({
      name: 'create_project',
      arguments: { name: 'From the editor' },
    })) as CallToolResult;
    expect(created.isError).toBeFalsy();
    expect(created.structuredContent).toMatchObject({ name: 'From the editor', org_id: user.clientId });
    const listed = (await signedIn.callTool({ name: 'list_projects', arguments: {} })) as CallToolResult;
    expect((listed.structuredContent as { data: { name: string }[] }).data.map((p) => p.name)).toContain(
      'From the editor',
    );
    await signedIn.close();
  }, 90_000); // many round trips; PGlite on a loaded CI machine needs the room
});
