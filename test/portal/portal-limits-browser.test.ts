import { beforeAll, describe, expect, it, vi } from 'vitest';
import type { Browser } from 'playwright-core';
import type { TestServer } from '../helpers/server.js';
import { addMember, createUser } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import {
  expectAccessible,
  expectNoSidewaysScroll,
  browserSuite,
  haveChromium,
  signedIn,
} from '../helpers/browser.js';

// The organization's rate limits on its settings page (CONTRACT §11) in a real browser at 390 px: the
// owner sets and clears them in a plain form (errors next to their field), a member reads them, a viewer
// does not see them; axe-core finds no serious or critical violation.

const suite = browserSuite();
vi.setConfig({ testTimeout: 180_000 });
let server: TestServer;
let browser: Browser;
beforeAll(() => {
  ({ server, browser } = suite);
});

const limitsOf = async (clientId: string, session: string) =>
  (
    await client(server.url).get<{ rpm: number | null; tpm: number | null }>(
      `/v1/clients/${clientId}/limits`,
      {
        token: session,
      },
    )
  ).body;

describe.skipIf(!haveChromium)('rate limits on the settings page', () => {
  it('the owner sets and clears them, a bad value is shown at its field; a member reads them; a viewer sees none', async () => {
    const owner = await createUser(server, { name: 'Olga Owner' });
    const settings = `${server.v2Url}/account/clients/${owner.clientId}/settings`;
    const { context, page } = await signedIn(browser, server.v2Url, owner, 390);
    await page.goto(settings);
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    await page.getByLabel('Requests per minute').fill('0');
    await page.getByRole('button', { name: 'Save limits' }).click();
    await expect.poll(() => page.locator('#f-rpm-error').textContent()).toContain('at least 1');
    expect(await page.getByLabel('Requests per minute').getAttribute('aria-invalid')).toBe('true');
    await expectAccessible(page);
    await page.getByLabel('Requests per minute').fill('60');
    await page.getByLabel('Tokens per minute').fill('100000');
    await page.getByRole('button', { name: 'Save limits' }).click();
    await page.waitForURL((u) => u.search.includes('notice=limits'));
    await expect.poll(() => page.getByRole('status').textContent()).toContain('Rate limits saved');
    expect(await limitsOf(owner.clientId, owner.session)).toMatchObject({ rpm: 60, tpm: 100_000 });
    expect(await page.getByLabel('Requests per minute').inputValue()).toBe('60');
    await expectAccessible(page);
    await page.getByLabel('Tokens per minute').fill('');
    await page.getByRole('button', { name: 'Save limits' }).click();
    await page.waitForURL((u) => u.search.includes('notice=limits'));
    expect(await limitsOf(owner.clientId, owner.session)).toMatchObject({ rpm: 60, tpm: null });
    await context.close();

    const mate = await createUser(server, { name: 'Mia Member' });
    await addMember(server, owner.orgKey, mate.userId, 'member');
    const asMember = await signedIn(browser, server.v2Url, mate, 390);
    await asMember.page.goto(settings);
    const card = asMember.page.locator('section[aria-labelledby="h-limits"]');
    await expect.poll(() => card.textContent()).toContain('60 calls');
    expect(await card.textContent()).toContain('no limit');
    expect(await card.locator('form').count()).toBe(0);
    await expectAccessible(asMember.page);
    await expectNoSidewaysScroll(asMember.page);
    await asMember.context.close();

    const viewer = await createUser(server, { name: 'Vic Viewer' });
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');
    const asViewer = await signedIn(browser, server.v2Url, viewer, 390);
    await asViewer.page.goto(settings);
    expect(await asViewer.page.locator('section[aria-labelledby="h-limits"]').count()).toBe(0);
    await asViewer.context.close();
  });
});
