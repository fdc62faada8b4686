import { describe, expect, it } from 'vitest';
import { browserSuite, haveChromium } from './helpers/browser.js';

// /docs in a real browser: Swagger UI, served from this origin, renders the document under the page's
// Content-Security-Policy with no violation reported, and makes no request to another origin (no CDN).

const suite = browserSuite();

describe.skipIf(!haveChromium)('/docs in a real browser', () => {
  it('renders every operation offline, under its CSP, with no violation', async () => {
    const context = await suite.browser.newContext();
    const page = await context.newPage();
    const foreign: string[] = [];
    const problems: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(suite.server.url) && !r.url().startsWith('data:')) foreign.push(r.url());
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
    await page.goto(`${suite.server.url}/docs`);
    await page.waitForSelector('.opblock', { timeout: 20_000 });
    const operations = await page.locator('.opblock').count();
    const described = (await (await fetch(`${suite.server.url}/openapi.json`)).json()) as {
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
