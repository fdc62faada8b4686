import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { discoverAuthorizationServer, registerPublicClient, sessionCookie } from '../helpers/oauth.js';

// The authorization endpoint before sign-in and the redirect URIs of metadata documents
// (CONTRACT §7). Real HTTP on the V2 origin, oauth4webapi for registration, a document
// server on loopback (DEV_MODE allows http://127.0.0.1 client IDs).

let server: TestServer;
let user: TestUser;
let docServer: Server;
let docBase: string;
const documents = new Map<string, unknown>();

beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
  docServer = createServer((req, res) => {
    const doc = documents.get(req.url ?? '');
    res.writeHead(doc ? 200 : 404, { 'content-type': 'application/json' });
    res.end(JSON.stringify(doc ?? {}));
  });
  await new Promise<void>((resolve) => docServer.listen(0, '127.0.0.1', resolve));
  docBase = `http://127.0.0.1:${(docServer.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => docServer?.close(resolve));
  await server?.close();
});

const CHALLENGE = 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM';

function authorizeUrl(params: Record<string, string>): string {
  const url = new URL('/oauth/authorize', server.v2Url);
  for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
  return url.href;
}

async function get(url: string, session?: string) {
  const res = await fetch(url, {
    redirect: 'manual',
    headers: session ? { cookie: sessionCookie(session) } : {},
  });
  return {
    status: res.status,
    location: res.headers.get('location'),
    csp: res.headers.get('content-security-policy'),
    text: await res.text(),
  };
}

async function registerDcr(redirectUri: string): Promise<string> {
  const as = await discoverAuthorizationServer(server.v2Url);
  return (await registerPublicClient(as, { redirect_uris: [redirectUri], client_name: 'Landing' })).client_id;
}

describe('errors before sign-in (RFC 9700 §4.11.2; item 8)', () => {
  it('a self-registered client with a bad request gets an error page, not a redirect, until the person signs in', async () => {
    const landing = 'https://evil.example/landing';
    const clientId = await registerDcr(landing);
    const bad = authorizeUrl({ client_id: clientId, redirect_uri: landing, response_type: 'x', state: 's' });

    const signedOut = await get(bad);
    expect(signedOut.status).toBe(400);
    expect(signedOut.location).toBeNull();
    expect(signedOut.text).toContain('response_type=code');

    // Signed in, the error goes back to the client (RFC 6749 §4.1.2.1), with state and iss.
    const signedIn = await get(bad, user.session);
    expect(signedIn.status).toBe(302);
    const back = new URL(signedIn.location!);
    expect(back.origin).toBe('https://evil.example');
    expect(back.searchParams.get('error')).toBe('unsupported_response_type');
    expect(back.searchParams.get('state')).toBe('s');
    expect(back.searchParams.get('iss')).toBe(server.v2Url);
  });

  it('a metadata-document client is treated the same way before sign-in', async () => {
    const clientId = `${docBase}/before-signin.json`;
    documents.set('/before-signin.json', {
      client_id: clientId,
      client_name: 'Doc client',
      redirect_uris: ['https://app.example/cb'],
    });
    const res = await get(
      authorizeUrl({ client_id: clientId, redirect_uri: 'https://app.example/cb', response_type: 'code' }),
    );
    expect(res.status).toBe(400);
    expect(res.location).toBeNull();
    expect(res.text).toContain('code_challenge');
  });

  it('svc-cli (its redirect URIs are loopback, ours) is still redirected with the error', async () => {
    const res = await get(
      authorizeUrl({
        client_id: 'svc-cli',
        redirect_uri: 'http://127.0.0.1:7777/callback',
        response_type: 'x',
      }),
    );
    expect(res.status).toBe(302);
    expect(new URL(res.location!).searchParams.get('error')).toBe('unsupported_response_type');
  });

  it('a valid request of a self-registered client still goes to sign-in first', async () => {
    const clientId = await registerDcr('https://app.example/cb');
    const res = await get(
      authorizeUrl({
        client_id: clientId,
        redirect_uri: 'https://app.example/cb',
        response_type: 'code',
        code_challenge: CHALLENGE,
        code_challenge_method: 'S256',
      }),
    );
    expect(res.status).toBe(303);
    expect(new URL(res.location!, server.v2Url).pathname).toBe('/account/login');
  });
});

describe('redirect URIs of metadata documents obey the rule of registration (item 9)', () => {
  it.each([
    ['javascript:', 'javascript:alert(document.domain)'],
    ['http:// to another host', 'http://evil.example/cb'],
    ['data:', 'data:text/html,hi'],
    ['a fragment', 'https://app.example/cb#x'],
  ])('a document listing %s is refused, signed in or not, and nothing is redirected', async (_label, uri) => {
    const path = `/bad-${documents.size}.json`;
    const clientId = `${docBase}${path}`;
    documents.set(path, { client_id: clientId, client_name: 'Bad', redirect_uris: [uri] });
    const url = authorizeUrl({
      client_id: clientId,
      redirect_uri: uri,
      response_type: 'code',
      code_challenge: CHALLENGE,
      code_challenge_method: 'S256',
    });
    for (const session of [undefined, user.session]) {
      const res = await get(url, session);
      expect(res.status).toBe(400);
      expect(res.location).toBeNull();
      expect(res.csp ?? '').not.toContain('javascript:');
    }
    // The same URI is refused by dynamic registration.
    const dcr = await fetch(`${server.v2Url}/oauth/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ redirect_uris: [uri], token_endpoint_auth_method: 'none' }),
    });
    expect(dcr.status).toBe(400);
    expect(((await dcr.json()) as { error: string }).error).toBe('invalid_redirect_uri');
  });

  it('a document with allowed redirect URIs reaches the consent page', async () => {
    const clientId = `${docBase}/good.json`;
    documents.set('/good.json', {
      client_id: clientId,
      client_name: 'Good doc',
      redirect_uris: ['https://app.example/cb', 'http://127.0.0.1/cb', 'com.example.app:/cb'],
    });
    const res = await get(
      authorizeUrl({
        client_id: clientId,
        redirect_uri: 'com.example.app:/cb',
        response_type: 'code',
        code_challenge: CHALLENGE,
        code_challenge_method: 'S256',
      }),
      user.session,
    );
    expect(res.status).toBe(200);
    expect(res.text).toContain('Good doc');
  });
});
