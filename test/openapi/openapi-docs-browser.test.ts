import { describe, expect, it } from 'vitest';
import { browserSuite, haveChromium } from '../helpers/browser.js';

// /docs in a real browser: Swagger UI, served from this origin, renders the document under the page's
// Content-Security-Policy with no violation reported, and makes no request to another origin (no CDN).
//
// Swagger UI (since 5.3x) virtualizes the operation list once it has 150 rows or more (tags plus the
// operations of open tags; the document has 157 operations in 11 tags): only the rows near the viewport
// are in the DOM, and the others are rendered as the reader scrolls to them. So the test reads the page
// as a reader does, from top to bottom, and collects every operation that was rendered on the way
// (docs/openapi.md § Swagger UI renders what is on screen).

const suite = browserSuite();
let swept: { rendered: Set<string>; documented: string[] } | null = null;

// These run in the page (strings: this project's TypeScript has no DOM types). page.evaluate goes through
// the DevTools protocol, which the page's CSP does not govern; a waitForFunction predicate would need eval.
const RENDERED_ROWS = `Array.from(document.querySelectorAll('.opblock')).map((e) =>
  e.querySelector('.opblock-summary-method').textContent.trim() + ' ' +
  e.querySelector('.opblock-summary-path').getAttribute('data-path'))`;
// Half a viewport down (rows are ~55 px, so no row can be skipped), then two frames for the virtualizer's
// scroll handler to render the rows now in view. Answers whether the page was already at its end.
const SCROLL_ON = `(async () => {
  const atEnd = window.scrollY + window.innerHeight >= document.documentElement.scrollHeight - 1;
  window.scrollBy(0, Math.floor(window.innerHeight / 2));
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return atEnd;
})()`;

describe.skipIf(!haveChromium)('/docs in a real browser', () => {
  it('renders offline, under its CSP, with no violation, from top to bottom', async () => {
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
    await page.addInitScript(
      "window.violations = []; document.addEventListener('securitypolicyviolation', (e) => window.violations.push(e.violatedDirective + ' ' + e.blockedURI));",
    );
    await page.goto(`${suite.server.url}/docs`);
    const described = (await (await fetch(`${suite.server.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, unknown>>;
    };
    const documented = Object.entries(described.paths).flatMap(([path, item]) =>
      Object.keys(item).map((method) => `${method.toUpperCase()} ${path}`),
    );
    await page.locator('.opblock').first().waitFor({ timeout: 60_000 });
    expect(await page.locator('.info .title').innerText()).toContain('svc');

    const rendered = new Set<string>();
    // Swagger UI's error boundary renders "😱 Could not render …" (class .fallback) in place of a part
    // that threw, and only says so in the console.
    let fallbacks = 0;
    for (let step = 0; step < 2_000; step++) {
      for (const row of await page.evaluate<string[]>(RENDERED_ROWS)) rendered.add(row);
      fallbacks += await page.locator('.fallback').count();
      if (await page.evaluate<boolean>(SCROLL_ON)) break;
    }
    swept = { rendered, documented };

    expect(fallbacks).toBe(0);
    const violations = await page.evaluate('window.violations');
    expect(violations).toEqual([]);
    expect(problems).toEqual([]);
    expect(foreign).toEqual([]);
    await page.screenshot({ path: '/tmp/svc-docs.png' });
    await context.close();
  });

  it('renders every operation of the document, and nothing else', () => {
    expect(swept).not.toBeNull();
    const { rendered, documented } = swept!;
    expect(documented.length).toBeGreaterThan(150);
    expect(documented.filter((op) => !rendered.has(op))).toEqual([]);
    expect([...rendered].filter((op) => !documented.includes(op))).toEqual([]);
    expect(rendered.size).toBe(documented.length);
  });
});
