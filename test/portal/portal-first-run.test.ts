import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Browser } from 'playwright-core';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import {
  closeContexts,
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  workerBrowser,
} from '../helpers/browser.js';
import { detailError, readJson } from '../helpers/json.js';
import type { DevMail, Page } from '../helpers/answers.js';

// First run and errors: `/` leads to the account page or sign-in; /dev/mail is a page
// for a browser and JSON for an API client; an unknown page or a bad dev checkout is an HTML error page
// for a browser and the JSON envelope for everyone else.

// A browser on a shared two-core machine: each step can wait for a busy CPU.
vi.setConfig({ testTimeout: 120_000 });

let server: TestServer;
let browser: Browser | undefined;
const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';

// The HTTP tests run without Chromium too, so this file starts its own server and takes the worker's
// Chromium (test/helpers/browser.ts) only when there is one.
beforeAll(async () => {
  server = await startTestServer();
  if (haveChromium) browser = await workerBrowser();
});
afterAll(async () => {
  if (browser) await closeContexts(browser);
  await server?.close();
});

describe('first run and errors over HTTP', () => {
  it('/ sends to /account, which sends a signed-out visitor to sign in', async () => {
    const res = await client(server.v2Url).get('/');
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe('/account');
  });

  it('an unknown page: HTML 404 for a browser, the JSON envelope for an API client', async () => {
    const page = await client(server.v2Url).get('/no/such/page', { headers: { accept: BROWSER_ACCEPT } });
    expect(page.status).toBe(404);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(page.headers.get('content-security-policy')).toContain("script-src 'none'");
    expect(page.body).toContain('<h1>Not found</h1>');
    const api = await client(server.v2Url).get('/no/such/page');
    expect(api.status).toBe(404);
    expect(api.body).toEqual({ detail: { code: 'NOT_FOUND', message: 'no such route' } });
    // /v1 stays JSON even for a browser.
    const v1 = await client(server.v2Url).get('/v1/nothing', { headers: { accept: BROWSER_ACCEPT } });
    expect(v1.headers.get('content-type')).toMatch(/json/);
  });

  it('a bad dev checkout: HTML for a browser, JSON otherwise', async () => {
    const page = await client(server.v2Url).get('/dev/checkout/cs_nope', {
      headers: { accept: BROWSER_ACCEPT },
    });
    expect([page.status, page.headers.get('content-type')?.split(';')[0]]).toEqual([404, 'text/html']);
    const api = await client(server.v2Url).get('/dev/checkout/cs_nope');
    expect(api.status).toBe(404);
    expect(readJson(detailError, api.body).detail.code).toBe('NOT_FOUND');
  });

  it('/dev/mail: JSON stays for API clients (to required), a page for browsers', async () => {
    const email = `first-run-${Date.now()}@example.test`;
    await client(server.url).post('/v1/register', { email, password: 'correct-Horse-9', name: 'Ada' });
    const json = await client(server.url).get<Page<DevMail>>('/dev/mail', {
      query: { to: email },
      headers: { accept: 'application/json' },
    });
    expect(json.body.data[0]!.subject).toMatch(/./);
    expect((await client(server.url).get('/dev/mail')).status).toBe(400);
    const page = await client(server.url).get('/dev/mail', {
      query: { to: email },
      headers: { accept: BROWSER_ACCEPT },
    });
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    expect(page.body).toMatch(/<a href="http:\/\/127\.0\.0\.2:\d+\/account\/verify\?token=[^"]+">/);
    // The mail's own HTML is never rendered as markup on our page.
    expect(page.body).not.toContain(json.body.data[0]!.html);
  });
});

describe.skipIf(!haveChromium)('first run in a real browser', () => {
  it('opens /, lands on sign-in; the mail page link verifies the address; the pages are accessible', async () => {
    const context = await browser!.newContext({ viewport: { width: 1200, height: 900 } });
    const page = await context.newPage();
    await page.goto(`${server.v2Url}/`);
    expect(new URL(page.url()).pathname).toBe('/account/login');
    await expectAccessible(page);
    const email = `first-run-browser-${Date.now()}@example.test`;
    await page.goto(`${server.v2Url}/account/register`);
    await page.getByLabel('Name').fill('Ada');
    await page.getByLabel('E-mail').fill(email);
    await page.getByLabel('Password').fill('correct-Horse-9');
    await page.getByRole('button', { name: /create|register/i }).click();
    await page.goto(`${server.v2Url}/dev/mail`);
    await page.getByLabel('Address').fill(email);
    await page.getByRole('button', { name: 'Show mail' }).click();
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    await page.getByRole('link', { name: /account\/verify/ }).click();
    expect(await page.locator('main').textContent()).toMatch(/verified/i);
    await page.goto(`${server.v2Url}/no/such/page`);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Not found');
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    await context.close();
  });
});
