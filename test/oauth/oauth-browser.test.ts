import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as oauth from 'oauth4webapi';
import { browserSuite, haveChromium } from '../helpers/browser.js';
import { createUser, STRONG_PASSWORD } from '../helpers/fixtures.js';

// One real browser (Debian's headless Chromium): a signed-out person opens an authorization URL, signs
// in, approves on the consent page and lands on the client's redirect with a code. This is what proves
// the cookies (__Host-, Secure, on http://127.0.0.x, which Chromium treats as a secure context), the
// CSRF cookie, the return_to round trip and the consent page's CSP form-action (which must let the
// post-consent redirect through) work together in a browser.

const suite = browserSuite();
let callback: Server;
let callbackUrl: string;
const landed: string[] = [];

beforeAll(async () => {
  if (!haveChromium) return;
  callback = createServer((req, res) => {
    if (req.url?.startsWith('/callback')) landed.push(req.url); // (not the favicon the browser also asks for)
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('signed in; you can close this window');
  });
  await new Promise<void>((resolve) => callback.listen(0, '127.0.0.1', resolve));
  callbackUrl = `http://127.0.0.1:${(callback.address() as AddressInfo).port}/callback`;
});

afterAll(async () => {
  await new Promise((resolve) => (callback ? callback.close(resolve) : resolve(undefined)));
});

describe.skipIf(!haveChromium)('real browser: sign in, consent, redirect', () => {
  it('lands on the client redirect with a code and iss, and the code exchanges', async () => {
    const user = await createUser(suite.server);
    const verifier = oauth.generateRandomCodeVerifier();
    const url = new URL('/oauth/authorize', suite.server.v2Url);
    url.search = new URLSearchParams({
      client_id: 'svc-cli',
      redirect_uri: callbackUrl,
      response_type: 'code',
      state: 'browser-state',
      code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
    }).toString();

    const context = await suite.browser.newContext();
    const page = await context.newPage();
    await page.goto(url.href);
    expect(new URL(page.url()).pathname).toBe('/account/login');
    await page.fill('input[name="email"]', user.email);
    await page.fill('input[name="password"]', STRONG_PASSWORD);
    await Promise.all([
      page.waitForURL((u) => u.pathname === '/oauth/authorize'),
      page.click('button[type="submit"]'),
    ]);
    const cookies = await context.cookies(suite.server.v2Url);
    expect(cookies.find((c) => c.name === '__Host-svc_session')).toMatchObject({
      secure: true,
      httpOnly: true,
    });
    expect(await page.locator('h1').textContent()).toContain('svc command-line tool');

    await Promise.all([
      page.waitForURL((u) => u.href.startsWith(callbackUrl)),
      page.click('button[value="approve"]'),
    ]);
    const back = new URL(page.url());
    expect(back.searchParams.get('state')).toBe('browser-state');
    expect(back.searchParams.get('iss')).toBe(suite.server.v2Url);
    expect(landed.length).toBe(1);
    await context.close();

    const res = await fetch(`${suite.server.v2Url}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'authorization_code',
        code: back.searchParams.get('code')!,
        redirect_uri: callbackUrl,
        client_id: 'svc-cli',
        code_verifier: verifier,
      }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { grants: unknown[] }).grants.length).toBe(2);
  }, 60_000);
});
