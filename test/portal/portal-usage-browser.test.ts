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
import { tokensAndMoney } from '../../src/portal/money.js';

// The usage page in a real browser: after some calls, a person reads what was spent,
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
    // svc tokens with their money at par; the model's tokens named as such.
    expect(summary).toContain(`${tokensAndMoney(debited)} debited by 2 calls`);
    expect(summary).toMatch(/\(\d+ input \+ \d+ output model tokens\)/);
    // The figure the page shows is the ledger's, read through the API.
    const api = await context.request.get(`${suite.server.v2Url}/v1/clients/${owner.clientId}/usage`);
    const apiBody = (await api.json()) as { totals: { credits_debited: number } };
    expect(apiBody.totals.credits_debited).toBe(debited);
    expect(summary).toContain(`$${(debited / 1000).toFixed(3).replace(/0$/, '')}`);
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
    expect(await page.locator('#h-daily + form + p').textContent()).toContain(
      `${tokensAndMoney(debited)} debited`,
    );
    expect(await page.locator('section[aria-labelledby=h-who]').count()).toBe(0);
    expect(await page.content()).not.toContain(member.email);
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    await context.close();
  });

  it('at 390 px the tables stack: every figure on screen, the chart labels readable (axe-clean)', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner, 390);
    await page.goto(`${suite.server.v2Url}/account/clients/${owner.clientId}/usage`);
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    // Each call is a block with its labels; its debit is inside the screen.
    const debit = page
      .locator('section[aria-labelledby=h-calls] tbody tr')
      .first()
      .locator('td[data-label=Debited]');
    const box = await debit.boundingBox();
    expect(box).not.toBeNull();
    expect(box!.x + box!.width).toBeLessThanOrEqual(390);
    expect(await debit.textContent()).toMatch(/^[\d,]+ tokens · \$\d+\.\d{2,3}$/);
    // The chart's labels are drawn at least 9 px tall on the phone's screen.
    const label = await page.locator('.chart svg text').first().boundingBox();
    expect(label!.height).toBeGreaterThanOrEqual(9);
    await context.close();
  });
});
