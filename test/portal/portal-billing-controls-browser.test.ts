import { beforeAll, describe, expect, it } from 'vitest';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import {
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  browserSuite,
  signedIn,
} from '../helpers/browser.js';
import { disableAutoTopup, getAutoTopup } from '../../src/billing/auto-topup-settings.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import { listBudgets } from '../../src/billing/budgets.js';

// On the billing page, in a real browser: the owner turns auto top-up on, changes
// it and off, and sets and removes budgets of a member and of a member's token; each mistake is said on
// the billing page next to its field, and nothing is saved; a member sees their own budget and auto
// top-up read-only, and a POST of theirs is 403. axe-core on every state, and the 390 px check.

const suite = browserSuite();
let owner: TestUser;
let member: TestUser;
let tokenId: number;

beforeAll(async () => {
  if (!haveChromium) return;
  owner = await createUser(suite.server, { name: 'Ada Owner' });
  member = await createUser(suite.server, { name: 'Bo Member' });
  await addMember(suite.server, owner.orgKey, member.userId, 'member');
  tokenId = (await createApiToken(suite.server, member, owner.orgKey, 'bo-laptop')).id;
});

const billingUrl = (clientId: string) => `${suite.server.v2Url}/account/clients/${clientId}/billing`;

describe.skipIf(!haveChromium)('the billing page: auto top-up and member budgets', () => {
  it('auto top-up: mistakes next to their fields, then on, changed, turned off by a decline, off', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner);
    await page.goto(billingUrl(owner.clientId));
    const card = page.locator('section[aria-labelledby="h-autotopup"]');
    expect(await card.textContent()).toContain('Off.');
    const trigger = page.getByLabel(/When the balance falls below/);
    const amount = page.getByLabel(/^Charge \(US dollars\)/);
    const cap = page.getByLabel(/At most per month/);

    await trigger.fill('20,000');
    await amount.fill('lots');
    await cap.fill('50');
    await page.getByRole('button', { name: 'Turn on auto top-up' }).click();
    await page.waitForLoadState();
    expect(await amount.getAttribute('aria-invalid')).toBe('true');
    expect(await page.locator('#f-at-amount-error').textContent()).toContain('1.00 to 10,000.00');
    expect(await trigger.inputValue()).toBe('20,000'); // what was typed stays
    expect(await getAutoTopup(suite.server.deps.db, owner.orgKey)).toBeNull();
    await expectAccessible(page);

    await amount.fill('25');
    await cap.fill('10');
    await page.getByRole('button', { name: 'Turn on auto top-up' }).click();
    await page.waitForLoadState();
    expect(await page.locator('#f-at-cap-error').textContent()).toContain('at least one charge');
    expect(await cap.getAttribute('aria-describedby')).toContain('f-at-cap-error');
    expect(await getAutoTopup(suite.server.deps.db, owner.orgKey)).toBeNull();

    await cap.fill('100.00');
    await page.getByRole('button', { name: 'Turn on auto top-up' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'autotopup_saved');
    expect(await getAutoTopup(suite.server.deps.db, owner.orgKey)).toMatchObject({
      enabled: true,
      trigger_credits: 20_000,
      amount_usd: 2_500,
      monthly_cap_usd: 10_000,
    });
    expect(await card.textContent()).toContain(
      'when the balance falls below 20,000 tokens · $20.00, $25.00 (25,000 tokens) is charged',
    );
    expect(await amount.inputValue()).toBe('25.00');
    await expectAccessible(page);

    // svc turns it off after a decline: the owner sees why.
    await disableAutoTopup(
      suite.server.deps.db,
      owner.orgKey,
      'charge declined: Your card was declined.',
      SYSTEM_ORIGIN,
    );
    await page.goto(billingUrl(owner.clientId));
    expect(await card.textContent()).toContain('Turned off by svc');
    expect(await card.textContent()).toContain('charge declined: Your card was declined.');
    await expectAccessible(page);
    await page.getByRole('button', { name: 'Turn on auto top-up' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'autotopup_saved');
    expect(await getAutoTopup(suite.server.deps.db, owner.orgKey)).toMatchObject({
      enabled: true,
      disabled_reason: null,
    });

    await page.getByRole('button', { name: 'Turn off auto top-up' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'autotopup_off');
    expect(await getAutoTopup(suite.server.deps.db, owner.orgKey)).toMatchObject({ enabled: false });
    await context.close();
  });

  it("budgets of a member and of a member's token: set, mistakes on the page, shown to the member, removed", async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner);
    await page.goto(billingUrl(owner.clientId));
    const card = page.locator('section[aria-labelledby="h-budgets"]');
    expect(await card.textContent()).toContain('No budgets');

    await page.getByLabel('For', { exact: true }).selectOption(`member:${member.userId}`);
    await page.getByLabel('Per', { exact: true }).selectOption('day');
    await page.getByLabel(/Budget in tokens/).fill('-5');
    await page.getByRole('button', { name: 'Save the budget' }).click();
    await page.waitForLoadState();
    const budget = page.getByLabel(/Budget in tokens/);
    expect(await budget.getAttribute('aria-invalid')).toBe('true');
    expect(await page.locator('#f-budget-amount-error').textContent()).toContain('whole number of tokens');
    // The choices stay as they were made.
    expect(await page.getByLabel('For', { exact: true }).inputValue()).toBe(`member:${member.userId}`);
    expect(await page.getByLabel('Per', { exact: true }).inputValue()).toBe('day');
    expect(await listBudgets(suite.server.deps.db, owner.orgKey)).toEqual([]);
    await expectAccessible(page);

    await budget.fill('5,000');
    await page.getByRole('button', { name: 'Save the budget' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'budget_saved');
    await page.getByLabel('For', { exact: true }).selectOption(`token:${String(tokenId)}`);
    await page.getByLabel('Per', { exact: true }).selectOption('week');
    await page.getByLabel(/Budget in tokens/).fill('900');
    await page.getByRole('button', { name: 'Save the budget' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'budget_saved');
    expect(
      (await listBudgets(suite.server.deps.db, owner.orgKey)).map((b) => [
        b.user_id,
        b.token_id,
        b.period,
        b.budget_credits,
      ]),
    ).toEqual([
      [member.userId, null, 'day', 5_000],
      [member.userId, tokenId, 'week', 900],
    ]);
    const rows = await card.locator('tbody tr').allTextContents();
    expect(rows[0]).toContain('Bo Member');
    expect(rows[0]).toContain('5,000');
    expect(rows[1]).toContain('token bo-laptop');
    expect(rows[1]).toContain('900');
    await expectAccessible(page);

    // The member sees their own budgets, read-only, and no owner forms.
    const m = await signedIn(suite.browser, suite.server.v2Url, member);
    await m.page.goto(billingUrl(owner.clientId));
    const theirs = m.page.locator('section[aria-labelledby="h-budgets"]');
    expect(await theirs.locator('h2').textContent()).toBe('Your budget');
    expect(await theirs.locator('tbody tr').count()).toBe(2);
    expect(await m.page.getByRole('button', { name: /Save the budget|Turn on auto top-up/ }).count()).toBe(0);
    await expectAccessible(m.page);
    // A POST of theirs (their own valid CSRF pair) is refused on the page, and changes nothing.
    const csrf = (await m.context.cookies()).find((c) => c.name === '__Host-svc_csrf')!.value;
    const answer = await m.page.request.post(`${billingUrl(owner.clientId)}/budgets/remove`, {
      form: { csrf_token: csrf, target: `member:${member.userId}` },
      maxRedirects: 0,
    });
    expect(answer.status()).toBe(403);
    const forged = await m.page.request.post(`${billingUrl(owner.clientId)}/auto-topup`, {
      form: { csrf_token: csrf, trigger: '1', amount: '100', cap: '100' },
      maxRedirects: 0,
    });
    expect(forged.status()).toBe(403);
    expect(await getAutoTopup(suite.server.deps.db, owner.orgKey)).toMatchObject({ enabled: false });
    await m.page.setViewportSize({ width: 390, height: 800 });
    await expectNoSidewaysScroll(m.page);
    await m.context.close();
    // Without the CSRF field the owner's own POST is refused too.
    const noCsrf = await page.request.post(`${billingUrl(owner.clientId)}/budgets/remove`, {
      form: { target: `member:${member.userId}` },
      maxRedirects: 0,
    });
    expect(noCsrf.status()).toBe(403);
    expect(await listBudgets(suite.server.deps.db, owner.orgKey)).toHaveLength(2);

    await page.getByRole('button', { name: 'Remove the budget of Bo Member', exact: false }).first().click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'budget_removed');
    expect((await listBudgets(suite.server.deps.db, owner.orgKey)).map((b) => b.token_id)).toEqual([tokenId]);
    await page.setViewportSize({ width: 390, height: 800 });
    await expectNoSidewaysScroll(page);
    await context.close();
  });
});
