import { existsSync } from 'node:fs';
import { afterAll, beforeAll, expect, vi } from 'vitest';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { AxeBuilder } from '@axe-core/playwright';
import { startTestServer, type StartOptions, type TestServer } from './server.js';

// Real Chromium (playwright-core) for the portal's page tests: launch, sign in through the form as a
// person does, and the checks every page gets: axe-core with zero serious or critical
// violations, and no sideways scroll at a 390 px wide phone.

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const haveChromium = existsSync(CHROMIUM);

export interface BrowserSuite {
  /** Set once the file's first beforeAll ran (undefined without Chromium: the describe is skipped). */
  readonly server: TestServer;
  readonly browser: Browser;
}

/**
 * The set-up every browser test file shares: a test server and Chromium started before the file's
 * tests and closed after, and a timeout a browser on a shared two-core machine needs. Without Chromium
 * the files skip (`describe.skipIf(!haveChromium)`), saying why; in CI (.ci/prepare installs Debian's
 * chromium) a missing browser fails the file instead. Call it at the top of the file, before the file's
 * own beforeAll hooks, which then run after it (vitest runs hooks in order) and may use `suite.server`.
 * `server` takes the test server's options, or a function that makes them (when they depend on
 * something an earlier hook started, such as a fake upstream's URL).
 */
export function browserSuite(server: StartOptions | (() => StartOptions) = {}): BrowserSuite {
  if (!haveChromium) {
    if (process.env.CI) throw new Error(`${CHROMIUM} is missing: .ci/prepare should have installed chromium`);
    console.warn(`${CHROMIUM} is missing; the real-browser tests are skipped (apt-get install chromium)`);
  }
  // Each step can wait for a busy CPU.
  vi.setConfig({ testTimeout: 120_000, hookTimeout: 120_000 });
  const suite = {} as { server: TestServer; browser: Browser };
  beforeAll(async () => {
    if (!haveChromium) return;
    suite.server = await startTestServer(typeof server === 'function' ? server() : server);
    suite.browser = await launchBrowser();
  });
  afterAll(async () => {
    await suite.browser?.close();
    await suite.server?.close();
  });
  return suite;
}

export async function launchBrowser(): Promise<Browser> {
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}

/** A new browser context signed in through /account/login with the user's e-mail and password. */
export async function signedIn(
  browser: Browser,
  base: string,
  user: { email: string; password: string },
  width = 1200,
): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({ viewport: { width, height: 900 } });
  const page = await context.newPage();
  await page.goto(`${base}/account/login`);
  await page.getByLabel('E-mail').fill(user.email);
  await page.getByLabel('Password').fill(user.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.pathname === '/account');
  return { context, page };
}

/** axe-core on the page as it is: no serious or critical violation. */
export async function expectAccessible(page: Page): Promise<void> {
  const { violations } = await new AxeBuilder({ page }).analyze();
  const bad = violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);
  expect(bad, `${page.url()}`).toEqual([]);
}

/** The page at 390 px wide has no horizontal scroll. */
export async function expectNoSidewaysScroll(page: Page): Promise<void> {
  const size = page.viewportSize();
  await page.setViewportSize({ width: 390, height: 844 });
  await page.reload();
  expect(
    await page.evaluate('document.documentElement.scrollWidth <= window.innerWidth + 1'),
    page.url(),
  ).toBe(true);
  if (size) await page.setViewportSize(size);
}
