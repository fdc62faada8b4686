import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
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
 * The set-up every browser test file shares: a test server started before the file's tests and closed
 * after, the worker's Chromium (`workerBrowser()`), and a timeout a browser on a shared two-core machine
 * needs. After the file, every browser context still open is closed, so the next file in the worker
 * starts with none: tests share no cookies or storage across contexts, and none across files.
 * Without Chromium the files skip (`describe.skipIf(!haveChromium)`), saying why; in CI (.ci/prepare
 * installs Debian's chromium) a missing browser fails the file instead. Call it at the top of the file,
 * before the file's own beforeAll hooks, which then run after it (vitest runs hooks in order) and may
 * use `suite.server`. `server` takes the test server's options, or a function that makes them (when
 * they depend on something an earlier hook started, such as a fake upstream's URL).
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
    suite.browser = await workerBrowser();
  });
  afterAll(async () => {
    if (suite.browser) await closeContexts(suite.browser);
    await suite.server?.close();
  });
  return suite;
}

/** Closes every context of the browser: what a test file opened and left open. */
export async function closeContexts(browser: Browser): Promise<void> {
  await Promise.all(browser.contexts().map((c) => c.close()));
}

export async function launchBrowser(options: { handleSIGTERM?: boolean } = {}): Promise<Browser> {
  const { chromium } = await import('playwright-core');
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    ...options,
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

// One Chromium per test process. The e2e project runs a worker's files one after another in one process
// (vitest.config.ts, decision record 0080); launching Chromium for each file cost more than most of
// their tests (decision record 0116). It is kept on globalThis so that a module graph loaded again in
// the same process (an isolated project) finds it instead of starting a second one.
const WORKER_BROWSER = Symbol.for('svc.test.worker-browser');
type Holder = { [WORKER_BROWSER]?: Promise<Browser> };

/**
 * The test process's Chromium, launched on first use (again if it went away). It is closed when vitest
 * stops the worker (SIGTERM), and waited for, so no Chromium outlives the run; a test's own browser
 * contexts keep it isolated from other tests and files.
 */
export async function workerBrowser(): Promise<Browser> {
  const holder = globalThis as Holder;
  const running = holder[WORKER_BROWSER];
  if (running) {
    const browser = await running.catch(() => undefined);
    if (browser?.isConnected()) return browser;
  }
  const launched = launchBrowser({ handleSIGTERM: false });
  holder[WORKER_BROWSER] = launched;
  const browser = await launched;
  const onTerm = () => {
    // vitest stops a worker with SIGTERM once its files are done: close Chromium (waiting for its
    // processes to exit), then end as the signal would have.
    void browser
      .close()
      .catch(() => {})
      .finally(() => {
        process.off('SIGTERM', onTerm);
        process.kill(process.pid, 'SIGTERM');
      });
  };
  process.once('SIGTERM', onTerm);
  browser.once('disconnected', () => {
    process.off('SIGTERM', onTerm);
    if (holder[WORKER_BROWSER] === launched) delete holder[WORKER_BROWSER];
  });
  return browser;
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

/**
 * axe-core on the page as it is: no serious or critical violation. axe-core is put into the page once per
 * document and run there (`axe.run`, what AxeBuilder's legacy mode does), not through AxeBuilder's default,
 * which injects it again on every call and finishes each run in a new blank page (3–5 times the CPU,
 * decision record 0116). A page with frames goes through AxeBuilder, which also checks inside them.
 */
export async function expectAccessible(page: Page): Promise<void> {
  const violations =
    page.frames().length > 1 ? (await new AxeBuilder({ page }).analyze()).violations : await axeRun(page);
  const bad = violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);
  expect(bad, `${page.url()}`).toEqual([]);
}

interface Violation {
  id: string;
  impact?: string | null;
  help: string;
  nodes: { target: unknown[] }[];
}

// The axe-core that @axe-core/playwright itself loads.
let axeSource: Promise<string> | undefined;
const axeScript = () =>
  (axeSource ??= readFile(
    createRequire(createRequire(import.meta.url).resolve('@axe-core/playwright')).resolve(
      'axe-core/axe.min.js',
    ),
    'utf8',
  ));

// Colour contrast is read from the styles as they are: a transition still running (a button's hover
// after a click) is measured mid-way. Waits for the finite ones to end (the positive signal), not a time.
const TRANSITIONS_ENDED = `Promise.all(document.getAnimations()
  .filter((a) => a.effect && a.effect.getComputedTiming().endTime !== Infinity)
  .map((a) => a.finished.catch(() => {})))`;

async function axeRun(page: Page): Promise<Violation[]> {
  await page.evaluate(TRANSITIONS_ENDED);
  if (!(await page.evaluate('typeof window.axe?.run === "function"'))) await page.evaluate(await axeScript());
  return page.evaluate<Violation[]>('axe.run(document).then((r) => r.violations)');
}

/**
 * The page at 390 px wide has no horizontal scroll. The pages lay out by CSS alone (no script runs on
 * them: CSP `script-src 'none'`), so the resized page is laid out as one loaded at 390 px would be.
 */
export async function expectNoSidewaysScroll(page: Page): Promise<void> {
  await atPhoneWidth(page, () => expectNoScrollNow(page));
}

/** axe-core at the page's width, then at 390 px both checks: no sideways scroll, axe-core. */
export async function expectAccessibleAtBothWidths(page: Page): Promise<void> {
  const wide = page.viewportSize()?.width !== PHONE.width;
  if (wide) await expectAccessible(page);
  await atPhoneWidth(page, async () => {
    await expectNoScrollNow(page);
    await expectAccessible(page);
  });
}

const PHONE = { width: 390, height: 844 };

async function atPhoneWidth(page: Page, check: () => Promise<void>): Promise<void> {
  const size = page.viewportSize();
  await page.setViewportSize(PHONE);
  await check();
  if (size) await page.setViewportSize(size);
}

async function expectNoScrollNow(page: Page): Promise<void> {
  expect(
    await page.evaluate('document.documentElement.scrollWidth <= window.innerWidth + 1'),
    page.url(),
  ).toBe(true);
}
