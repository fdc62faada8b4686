import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import {
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  browserSuite,
  signedIn,
} from '../helpers/browser.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';

// The usage page in a real browser (issue 16 item 3): after some calls, a person reads what was spent,
// by whom and with which credential, and downloads the CSV; a viewer sees the totals only. Every page
// visited is checked with axe-core and at 390 px.

let fake: FakeUpstream;
beforeAll(async () => {
  if (haveChromium) fake = await startFakeUpstream();
});
afterAll(async () => {
  await fake?.close();
});
// Registered after the fake's hooks: the server starts after the fake (its env names the fake's URL)
// and closes before it.
const suite = browserSuite(() => ({ env: fake.env() }));
let owner: TestUser;
let member: TestUser;
let viewer: TestUser;
let debited = 0;

beforeAll(async () => {
  if (!haveChromium) return;
  owner = await createUser(suite.server, { name: 'Ada Owner' });
  member = await createUser(suite.server, { name: 'Bo Member' });
  viewer = await createUser(suite.server, { name: 'Cy Viewer' });
  await addMember(suite.server, owner.orgKey, member.userId, 'member');
  await addMember(suite.server, owner.orgKey, viewer.userId, 'viewer');
  const before = await orgBalanceCredits(suite.server.deps.db, owner.orgKey);
  for (const [who, name] of [
    [owner, 'laptop'],
    [member, 'ci-runner'],
  ] as const) {
    const { secret } = await createApiToken(suite.server, who, owner.orgKey, name);
    const sdk = new OpenAI({ apiKey: secret, baseURL: `${suite.server.url}/v1`, maxRetries: 0 });
    await sdk.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hello' }] });
  }
  debited = before - (await orgBalanceCredits(suite.server.deps.db, owner.orgKey));
});

describe.skipIf(!haveChromium)('the usage page', () => {
  it('an owner reads the totals, the chart, who spent with which token, the calls, and downloads the CSV', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Usage' }).click();
    await page.waitForURL((u) => u.pathname === `/account/clients/${owner.clientId}/usage`);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toContain('Usage of');
    const summary = await page.locator('#h-daily + form + p').textContent();
    expect(summary).toContain(`${debited} tokens debited by 2 calls`);
    expect(await page.getByRole('img', { name: /Tokens debited per day/ }).count()).toBe(1);
    const who = await page.locator('section[aria-labelledby=h-who]').textContent();
    expect(who).toContain(owner.email);
    expect(who).toContain(member.email);
    expect(who).toContain('API token ci-runner');
    const calls = page.locator('section[aria-labelledby=h-calls] tbody tr');
    expect(await calls.count()).toBe(2);
    await page.getByLabel('Period').selectOption('7');
    await page.getByRole('button', { name: 'Show' }).click();
    await page.waitForURL((u) => u.searchParams.get('days') === '7');
    // The CSV link works with the page's own session.
    const href = await page.getByRole('link', { name: 'Download the calls (CSV)' }).getAttribute('href');
    const csv = await context.request.get(new URL(href!, suite.server.v2Url).toString());
    expect(csv.status()).toBe(200);
    expect((await csv.text()).trimEnd().split('\r\n')).toHaveLength(3);
    await page.screenshot({ path: '/tmp/portal-usage.png', fullPage: true });
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    await context.close();
  });

  it('a viewer sees the totals and the chart, not who spent', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, viewer, 390);
    await page.goto(`${suite.server.v2Url}/account/clients/${owner.clientId}/usage`);
    expect(await page.locator('#h-daily + form + p').textContent()).toContain(`${debited} tokens debited`);
    expect(await page.locator('section[aria-labelledby=h-who]').count()).toBe(0);
    expect(await page.content()).not.toContain(member.email);
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    await context.close();
  });

  it('at 390 px the tables scroll in regions the keyboard reaches and scrolls (axe-clean)', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner, 390);
    await page.goto(`${suite.server.v2Url}/account/clients/${owner.clientId}/usage`);
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    // In the page's own terms (the test's types have no DOM): the calls table's scroll box.
    const region = `document.querySelector('div.scroll[aria-labelledby=h-calls]')`;
    // The calls table is wider than the screen at this width: its box scrolls.
    expect(await page.evaluate(`${region}.scrollWidth > ${region}.clientWidth`)).toBe(true);
    let reached = false;
    for (let i = 0; i < 100 && !reached; i++) {
      await page.keyboard.press('Tab');
      reached = (await page.evaluate(`document.activeElement === ${region}`)) === true;
    }
    expect(reached).toBe(true);
    // The arrow keys scroll the focused region sideways.
    for (let i = 0; i < 5; i++) await page.keyboard.press('ArrowRight');
    await expect.poll(async () => Number(await page.evaluate(`${region}.scrollLeft`))).toBeGreaterThan(0);
    await context.close();
  });
});
