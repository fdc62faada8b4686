import { describe, expect, it } from 'vitest';
import { createUser } from '../helpers/fixtures.js';
import {
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  browserSuite,
  signedIn,
} from '../helpers/browser.js';
import { PASSWORD_HINT } from '../../src/portal/components.js';

// The billing page's sections reachable from its top, the footer's link to the API reference, and the
// one password hint of every form that sets a password (docs/portal.md "What a person finds where").
// Chromium at 1280 and 390 px, axe on each page.

const suite = browserSuite();

describe.skipIf(!haveChromium)('sections, footer and the password hint', () => {
  it('the billing page lists its sections at the top; each link reaches its section', async () => {
    const owner = await createUser(suite.server, { name: 'Ada Owner' });
    for (const width of [1280, 390]) {
      const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner, width);
      await page.goto(`${suite.server.v2Url}/account/clients/${owner.clientId}/billing`);
      const nav = page.getByRole('navigation', { name: 'Billing sections' });
      const names = await nav.getByRole('link').allTextContents();
      expect(names).toEqual([
        'Overview',
        'Buy tokens',
        'Automations',
        "Members' budgets",
        'Invoices',
        'Transactions',
      ]);
      for (const link of await nav.getByRole('link').all()) {
        const id = (await link.getAttribute('href'))!.slice(1);
        expect(await page.locator(`[id="${id}"]`).count()).toBe(1);
      }
      await nav.getByRole('link', { name: 'Transactions' }).click();
      await page.waitForURL((u) => u.hash === '#transactions');
      expect(await page.locator('#transactions').isVisible()).toBe(true);
      await expectAccessible(page);
      await expectNoSidewaysScroll(page);
      await context.close();
    }
  });

  it('the footer links the API reference; registration and settings show the same password rule', async () => {
    const person = await createUser(suite.server);
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, person, 390);
    await page.goto(`${suite.server.v2Url}/account/settings`);
    expect(
      await page.locator('footer').getByRole('link', { name: 'API reference' }).getAttribute('href'),
    ).toBe('/docs');
    expect(await page.locator('main').textContent()).toContain(PASSWORD_HINT);
    expect(await page.locator('main').textContent()).not.toContain('at least 10 characters');
    await expectAccessible(page);
    await context.close();
    const visitor = await suite.browser.newContext({ viewport: { width: 1280, height: 900 } });
    const reg = await visitor.newPage();
    await reg.goto(`${suite.server.v2Url}/account/register`);
    expect(await reg.locator('main').textContent()).toContain(PASSWORD_HINT);
    await expectAccessible(reg);
    await visitor.close();
  });
});
