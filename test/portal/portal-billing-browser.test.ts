import { beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { addMember, createUser, type TestUser } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import {
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  browserSuite,
  signedIn,
} from '../helpers/browser.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { ownerBalance } from '../../src/billing/service.js';
import { tokensAndMoney } from '../../src/portal/money.js';

// The billing page in a real browser, against the dev processor (no STRIPE_SECRET_KEY):
// an owner moves tokens between two organizations in one form, buys tokens (seeing what they buy before
// paying) and sees the notice, subscribes to Pro and sees its status, and is told when a card is
// declined; a member reads and cannot act. axe-core and the 390 px check on every state.

const suite = browserSuite();
let owner: TestUser;
let member: TestUser;
let team: { id: string; name: string };

beforeAll(async () => {
  if (!haveChromium) return;
  owner = await createUser(suite.server, { name: 'Ada Owner' });
  member = await createUser(suite.server, { name: 'Bo Member' });
  await addMember(suite.server, owner.orgKey, member.userId, 'member');
  const created = await client(suite.server.url).post<{ id: string }>(
    '/v1/clients',
    { name: 'Research' },
    { token: owner.session },
  );
  team = { id: created.body.id, name: 'Research' };
});

const billingUrl = (clientId: string) => `${suite.server.v2Url}/account/clients/${clientId}/billing`;
const status = (page: Page) => page.getByRole('status').first().textContent();

describe.skipIf(!haveChromium)('the billing page', () => {
  it('allocates between two organizations in one form; too much is explained in words', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Billing' }).click();
    await page.waitForURL((u) => u.pathname === `/account/clients/${owner.clientId}/billing`);
    await expectAccessible(page);
    await page.getByLabel(/\(personal\)/).fill('30000');
    await page.getByLabel(/^Research/).fill('20000');
    await page.getByRole('button', { name: 'Save allocations' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'allocated');
    expect(await status(page)).toContain('Allocations saved');
    expect(await orgBalanceCredits(suite.server.deps.db, owner.orgKey)).toBe(30_000);
    expect(await orgBalanceCredits(suite.server.deps.db, team.id.replace(/^client_/, ''))).toBe(20_000);

    await page.getByLabel(/^Research/).fill('90000');
    await page.getByRole('button', { name: 'Save allocations' }).click();
    await page.waitForLoadState();
    expect(await page.getByRole('alert').textContent()).toContain(
      'Not enough unallocated tokens to give Research 90,000',
    );
    expect((await ownerBalance(suite.server.deps.db, owner.userId)).global_credits).toBe(50_000);
    await expectAccessible(page);
    await context.close();
  });

  it('tops up through the dev checkout: the tokens are shown before paying, and the notice after', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner);
    await page.goto(billingUrl(owner.clientId));
    await page.getByLabel(/Amount in US dollars/).fill('abc');
    await page.getByRole('button', { name: 'Review' }).click();
    await page.waitForLoadState();
    expect(await page.locator('#f-amount-error').textContent()).toContain('Enter an amount');
    expect(await page.evaluate('document.activeElement && document.activeElement.id')).toBe('f-amount');
    await page.getByLabel(/Amount in US dollars/).fill('12.50');
    await page.getByRole('button', { name: 'Review' }).click();
    await page.waitForLoadState();
    expect(await page.locator('main').textContent()).toContain('$12.50 buys 12,500 tokens');
    await expectAccessible(page);
    const before = await orgBalanceCredits(suite.server.deps.db, owner.orgKey);
    await page.getByRole('button', { name: 'Pay $12.50' }).click();
    await page.waitForURL((u) => u.pathname.startsWith('/dev/checkout/'));
    await page.getByRole('button', { name: /^Pay/ }).click();
    await page.waitForURL((u) => u.searchParams.get('checkout') === 'success');
    expect(await status(page)).toContain('Payment received');
    expect((await orgBalanceCredits(suite.server.deps.db, owner.orgKey)) - before).toBe(12_500);
    expect(await page.locator('section[aria-labelledby=h-tx]').textContent()).toContain('+12,500');
    expect(
      await page.locator('section[aria-labelledby=h-invoices]').getByRole('link').count(),
    ).toBeGreaterThan(0);
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);

    // A declined card: back on the page with a notice that says so, nothing granted.
    await page.getByLabel(/Amount in US dollars/).fill('5');
    await page.getByRole('button', { name: 'Review' }).click();
    await page.getByRole('button', { name: 'Pay $5.00' }).click();
    await page.waitForURL((u) => u.pathname.startsWith('/dev/checkout/'));
    const afterPaid = await orgBalanceCredits(suite.server.deps.db, owner.orgKey);
    await page.getByRole('button', { name: 'Simulate a declined card' }).click();
    await page.waitForURL((u) => u.searchParams.get('checkout') === 'cancelled');
    expect(await page.getByRole('alert').textContent()).toContain('declined');
    expect(await orgBalanceCredits(suite.server.deps.db, owner.orgKey)).toBe(afterPaid);
    await context.close();
  });

  it('subscribes to Pro and shows its status and period end; the portal button leads to the processor', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner);
    await page.goto(billingUrl(team.id));
    // The price and what it grants, before any click.
    expect(await page.locator('section[aria-labelledby=h-pro]').textContent()).toContain(
      'Pro: $200.00 / month, 210,000 tokens',
    );
    await page.getByRole('button', { name: 'Subscribe to Pro' }).click();
    await page.waitForURL((u) => u.pathname.startsWith('/dev/checkout/'));
    await page.getByRole('button', { name: /^Pay/ }).click();
    await page.waitForURL((u) => u.searchParams.get('checkout') === 'success');
    const pro = await page.locator('section[aria-labelledby=h-pro]').textContent();
    expect(pro).toContain('Status: active');
    expect(pro).toMatch(/renews \d{4}-\d{2}-\d{2}/);
    await page.getByRole('button', { name: /Cancel or manage the subscription/ }).click();
    await page.waitForURL((u) => u.pathname.startsWith('/dev/portal/'));
    await context.close();
  });

  it('a member reads the balance and transactions, with no forms; an outsider gets 404', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, member, 390);
    await page.goto(billingUrl(owner.clientId));
    // The balance in tokens and in money at par, as the ledger has it.
    const left = await orgBalanceCredits(suite.server.deps.db, owner.orgKey);
    expect(await page.locator('section[aria-labelledby=h-balance]').textContent()).toContain(
      `${tokensAndMoney(left)} left`,
    );
    expect(await page.locator('main form').count()).toBe(0);
    // At phone width the invoices and transactions stack: one block per row, each figure labelled.
    for (const table of ['h-invoices', 'h-tx']) {
      const cell = page.locator(`table[aria-labelledby=${table}] tbody td`).first();
      if ((await cell.count()) === 0) continue;
      const display = await page.evaluate(
        `getComputedStyle(document.querySelector('table[aria-labelledby=${table}] tbody td')).display`,
      );
      expect(display, table).toBe('block');
      expect(await cell.getAttribute('data-label'), table).toBeTruthy();
    }
    expect(await page.locator('table[aria-labelledby=h-tx] tbody td').count()).toBeGreaterThan(0);
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    const res = await page.goto(billingUrl(team.id));
    expect(res!.status()).toBe(404);
    await context.close();
  });
});
