import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'playwright-core';
import { startTestServer, type TestServer } from './helpers/server.js';

// /docs in a real browser: Swagger UI, served from this origin, renders the document under the page's
// Content-Security-Policy with no violation reported, and makes no request to another origin (no CDN).

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium)
  console.warn(`openapi-docs-browser: ${CHROMIUM} is missing; skipped (apt-get install chromium)`);

let server: TestServer;
let browser: Browser;

beforeAll(async () => {
  if (!haveChromium) return;
  server = await startTestServer();
  const { chromium } = await import('playwright-core');
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--no-first-run',
    ],
  });
});
afterAll(async () => {
  await browser?.close();
  await server?.close();
});

describe.skipIf(!haveChromium)('/docs in a real browser', () => {
  it('renders every operation offline, under its CSP, with no violation', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    const foreign: string[] = [];
    const problems: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(server.url) && !r.url().startsWith('data:')) foreign.push(r.url());
    });
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(m.text());
    });
    page.on('pageerror', (e) => problems.push(String(e)));
    page.on('response', (r) => {
      if (r.status() >= 400) problems.push(`${r.status()} ${r.url()}`);
    });
    // Runs in the page (a string: this project's TypeScript has no DOM types).
    await page.addInitScript(
      "window.violations = []; document.addEventListener('securitypolicyviolation', (e) => window.violations.push(e.violatedDirective + ' ' + e.blockedURI));",
    );
    await page.goto(`${server.url}/docs`);
    await page.waitForSelector('.opblock', { timeout: 20_000 });
    const operations = await page.locator('.opblock').count();
    const described = (await (await fetch(`${server.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, unknown>>;
    };
    const operationCount = Object.values(described.paths).reduce(
      (n, item) => n + Object.keys(item).length,
      0,
    );
    expect(operations).toBe(operationCount);
    expect(await page.locator('.info .title').innerText()).toContain('svc');
    const violations = await page.evaluate('window.violations');
    expect(violations).toEqual([]);
    expect(problems).toEqual([]);
    expect(foreign).toEqual([]);
    await page.screenshot({ path: '/tmp/svc-docs.png' });
    await context.close();
  });
});
