import { beforeAll, describe, expect, it } from 'vitest';
import { createUser, type TestUser } from './helpers/fixtures.js';
import {
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  browserSuite,
  signedIn,
} from './helpers/browser.js';
import { getBalanceAlert } from '../src/billing/balance-alerts.js';
import { listEndpoints } from '../src/events/endpoints.js';

// Issue 19 items 1 and 5 on the billing page, in a real browser: the owner sets the low-balance alert,
// adds a webhook endpoint (its secret shown once), sees it listed and removes it; a mistake is said in
// words. axe-core on every state, and the 390 px check.

const suite = browserSuite();
let owner: TestUser;

beforeAll(async () => {
  if (!haveChromium) return;
  owner = await createUser(suite.server, { name: 'Ada Owner' });
});

const billingUrl = (clientId: string) => `${suite.server.v2Url}/account/clients/${clientId}/billing`;

describe.skipIf(!haveChromium)('the billing page: alerts and webhook endpoints', () => {
  it('sets the alert, adds an endpoint (secret once), lists and removes it', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner);
    await page.goto(billingUrl(owner.clientId));
    await expectAccessible(page);
    await page.getByLabel(/Alert me below this many tokens/).fill('5,000');
    await page.getByRole('button', { name: 'Save the alert' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'alert_saved');
    expect(await page.getByRole('status').first().textContent()).toContain('Low-balance alert saved');
    expect(await getBalanceAlert(suite.server.deps.db, owner.orgKey)).toMatchObject({
      threshold_credits: 5_000,
    });
    expect(await page.locator('main').textContent()).toContain('On, below 5,000 tokens and at 0.');

    await page.getByLabel(/Alert me below this many tokens/).fill('lots');
    await page.getByRole('button', { name: 'Save the alert' }).click();
    await page.waitForLoadState();
    expect(await page.getByRole('alert').textContent()).toContain('whole number of tokens');
    await expectAccessible(page);
    await page.goto(billingUrl(owner.clientId));

    await page.getByLabel('URL', { exact: true }).fill('https://hooks.example/svc');
    await page.getByLabel('balance.low', { exact: true }).check();
    await page.getByLabel('topup.succeeded', { exact: true }).check();
    await page.getByRole('button', { name: 'Add the endpoint' }).click();
    await page.waitForLoadState();
    const secret = await page.locator('main code').textContent();
    expect(secret).toMatch(/^whsec_/);
    expect((await listEndpoints(suite.server.deps.db, owner.orgKey)).data).toHaveLength(1);
    // (The phone-width check reloads the page: on this answer to a POST it would add the endpoint again.)
    await expectAccessible(page);
    await page.getByRole('link', { name: 'Back to billing' }).click();
    await page.waitForURL((u) => u.pathname.endsWith('/billing'));
    expect((await listEndpoints(suite.server.deps.db, owner.orgKey)).data).toHaveLength(1);
    const main = (await page.locator('main').textContent()) ?? '';
    expect(main).toContain('https://hooks.example/svc');
    expect(main).toContain('balance.low, topup.succeeded');
    expect(main).not.toContain(secret!);
    await expectAccessible(page);

    await page.getByRole('button', { name: 'Remove the endpoint https://hooks.example/svc' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'endpoint_removed');
    expect((await listEndpoints(suite.server.deps.db, owner.orgKey)).data).toEqual([]);
    await page.setViewportSize({ width: 390, height: 800 });
    await expectNoSidewaysScroll(page);
    await context.close();
  });
});
