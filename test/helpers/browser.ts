import { existsSync } from 'node:fs';
import { expect } from 'vitest';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { AxeBuilder } from '@axe-core/playwright';

// Real Chromium (playwright-core) for the portal's page tests: launch, sign in through the form as a
// person does, and the checks every page gets (issue 16): axe-core with zero serious or critical
// violations, and no sideways scroll at a 390 px wide phone.

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const haveChromium = existsSync(CHROMIUM);

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
