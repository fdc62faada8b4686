import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, STRONG_PASSWORD, type TestUser } from '../helpers/fixtures.js';
import { PageClient, csrfOf, hiddenOf } from '../helpers/page-client.js';
import { sessionCookie } from '../helpers/oauth.js';
import { safeReturnTo } from '../../src/page-kit/return-to.js';

// Sign-in's return_to never leaves the origin (RFC 9700 §4.11). URL normalisation
// resolves dot segments, so spellings that pass a check of the raw string became `//evil.example/…`
// afterwards: a signed-in visitor was sent there at once and the sign-in form carried it. Every
// spelling below is tried where a browser meets it: the 303 of a signed-in visitor, the form's hidden
// field, and the redirect after signing in.

const BYPASSES = [
  '/.//evil.example/phish',
  '/a/..//evil.example',
  '/%2e//evil.example',
  '/%2E%2e//evil.example',
  '/..//evil.example',
  '/a/b/../..//evil.example',
  '/././/evil.example',
  '/.%2F/..//evil.example',
  '//evil.example',
  '///evil.example',
  '/\\evil.example',
  '/./\\evil.example',
  '/\t/evil.example',
  '/\n/evil.example',
  'https://evil.example/',
  'javascript:alert(1)',
  'evil.example',
];

const KEPT: [string, string][] = [
  ['/account/device?user_code=ABCD-EFGH', '/account/device?user_code=ABCD-EFGH'],
  ['/a/../account', '/account'],
  ['/account/./clients#top', '/account/clients#top'],
  ['/%2F%2Fevil.example', '/%2F%2Fevil.example'], // an encoded slash is a path character, not a separator
];

let server: TestServer;
let user: TestUser;
beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
});
afterAll(async () => {
  await server?.close();
});

const loginWith = (returnTo: string) => `/account/login?return_to=${encodeURIComponent(returnTo)}`;

describe('safeReturnTo', () => {
  it.each(BYPASSES)('refuses %j', (spelling) => {
    expect(safeReturnTo(spelling)).toBeNull();
  });
  it.each(KEPT)('keeps %j as %j', (spelling, expected) => {
    expect(safeReturnTo(spelling)).toBe(expected);
  });
});

describe('return_to over HTTP', () => {
  it.each(BYPASSES)('a signed-in visitor with return_to=%j stays on the origin', async (spelling) => {
    const res = await fetch(new URL(loginWith(spelling), server.v2Url), {
      headers: { cookie: sessionCookie(user.session) },
      redirect: 'manual',
    });
    expect(res.status).toBe(303);
    const target = new URL(res.headers.get('location')!, server.v2Url);
    expect(target.origin).toBe(server.v2Url);
    expect(target.pathname).toBe('/account');
  });

  it.each(BYPASSES)(
    'the sign-in form does not carry return_to=%j, and signing in lands on /account',
    async (spelling) => {
      const browser = new PageClient(server.v2Url);
      const page = await browser.get(loginWith(spelling));
      expect(page.status).toBe(200);
      expect(hiddenOf(page.text, 'return_to') ?? '').toBe('');
      // The form posted with the hostile value anyway (a crafted form on another tab of the same site).
      const res = await browser.post('/account/login', {
        csrf_token: csrfOf(page.text),
        email: user.email,
        password: STRONG_PASSWORD,
        return_to: spelling,
      });
      expect(res.status).toBe(303);
      expect(res.location).toBe(`${server.v2Url}/account`);
    },
  );

  it('a safe return_to still round-trips through sign-in', async () => {
    const browser = new PageClient(server.v2Url);
    const page = await browser.get(loginWith('/a/../account/device?user_code=ABCD-EFGH'));
    expect(hiddenOf(page.text, 'return_to')).toBe('/account/device?user_code=ABCD-EFGH');
    const res = await browser.post('/account/login', {
      csrf_token: csrfOf(page.text),
      email: user.email,
      password: STRONG_PASSWORD,
      return_to: hiddenOf(page.text, 'return_to')!,
    });
    expect(res.location).toBe(`${server.v2Url}/account/device?user_code=ABCD-EFGH`);
  });
});
