import { beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import { eventuallyValue } from '../helpers/eventually.js';
import {
  browserSuite,
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  signedIn,
} from '../helpers/browser.js';

// Billing a person can trust, in a real browser against the dev processor: a refused allocation keeps
// what was typed, the place on the page and the focus on the organization in error; allocation moves
// appear under the transactions with their time, matching what the API says of the pool; a top-up leaves
// an invoice row and a receipt mail with the amount the ledger granted; forms in error give their field
// the focus. axe-clean at 1280 and 390 px.

const suite = browserSuite();
let owner: TestUser;
let research: string;
const api = () => client(suite.server.url);

beforeAll(async () => {
  if (!haveChromium) return;
  owner = await createUser(suite.server, { name: 'Ada Owner' });
  research = (await api().post<{ id: string }>('/v1/clients', { name: 'Research' }, { token: owner.session }))
    .body.id;
});

const billing = (clientId: string) => `${suite.server.v2Url}/account/clients/${clientId}/billing`;
const focusedId = (page: Page) => page.evaluate('document.activeElement && document.activeElement.id');
const allocations = async () =>
  (
    await api().get<{ allocations: { org_id: string; allocated_credits: number }[] }>('/v1/owner/balance', {
      token: owner.session,
    })
  ).body.allocations;

describe.skipIf(!haveChromium)('billing you can trust', () => {
  it('a refused allocation keeps the values, the place and the focus; the moves are listed with their time', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner, 1280);
    await page.goto(billing(owner.clientId));
    await page.getByLabel(/\(personal\)/).fill('30000');
    await page.getByLabel(/^Research/).fill('20000');
    await page.getByRole('button', { name: 'Save allocations' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'allocated');
    const after = await allocations();
    expect(after.find((a) => a.org_id === research)?.allocated_credits).toBe(20_000);

    await page.getByLabel(/\(personal\)/).fill('25000');
    await page.getByLabel(/^Research/).fill('90000');
    await page.getByRole('button', { name: 'Save allocations' }).click();
    await page.waitForURL((u) => u.pathname === '/account/allocations');
    expect(await page.getByRole('alert').textContent()).toContain(
      'Not enough unallocated tokens to give Research 90,000',
    );
    expect(await page.getByLabel(/^Research/).inputValue()).toBe('90000');
    expect(await page.getByLabel(/\(personal\)/).inputValue()).toBe('25000');
    const researchField = await page.getByLabel(/^Research/).getAttribute('id');
    expect(await focusedId(page)).toBe(researchField);
    // The place: the field in error is in view.
    expect(
      await page.evaluate(
        `(() => { const r = document.getElementById(${JSON.stringify(researchField)}).getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight; })()`,
      ),
    ).toBe(true);
    expect(await page.getByLabel(/^Research/).getAttribute('aria-invalid')).toBe('true');
    await expectAccessible(page);
    // The lowered allocation was saved before the refusal; the API says so too.
    expect((await allocations()).find((a) => a.org_id !== research)?.allocated_credits).toBe(25_000);

    // Research's page lists the move from the pool, with its time and the balance after it.
    await page.goto(billing(research));
    const moves = page.locator('table[aria-labelledby=h-moves] tbody tr');
    expect(await moves.count()).toBe(1);
    expect(await moves.first().textContent()).toContain("From the owner's pool");
    expect(await moves.first().locator('td[data-label="Amount"]').textContent()).toBe(
      '+20,000 tokens · $20.00',
    );
    expect(await moves.first().locator('td[data-label="Time (UTC)"]').textContent()).toMatch(
      /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}$/,
    );
    // The personal organization's page: the trial, then the reclaims that funded Research.
    await page.goto(billing(owner.clientId));
    const back = await page
      .locator('table[aria-labelledby=h-moves] tbody tr td[data-label="Amount"]')
      .allTextContents();
    expect(back).toContain('-5,000 tokens · -$5.00');
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    await context.close();
  });

  it('a top-up leaves an invoice row and a receipt mail of what was granted', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner, 390);
    await page.goto(billing(owner.clientId));
    const before = (await allocations()).find((a) => a.org_id === owner.clientId)!.allocated_credits;
    await page.getByLabel(/Amount in US dollars/).fill('12.50');
    await page.getByRole('button', { name: 'Review' }).click();
    await page.getByRole('button', { name: 'Pay $12.50' }).click();
    await page.waitForURL((u) => u.pathname.startsWith('/dev/checkout/'));
    expect(await page.locator('main').textContent()).not.toContain('USD');
    await expectAccessible(page);
    await page.getByRole('button', { name: /^Pay/ }).click();
    await page.waitForURL((u) => u.searchParams.get('checkout') === 'success');
    expect((await allocations()).find((a) => a.org_id === owner.clientId)!.allocated_credits - before).toBe(
      12_500,
    );
    const invoices = await api().get<{ amount_paid_cents: number; status: string }[]>(
      `/v1/clients/${owner.clientId}/invoices`,
      { token: owner.session },
    );
    expect(invoices.body[0]).toMatchObject({ amount_paid_cents: 1_250, status: 'paid' });
    expect(
      await page.locator('section[aria-labelledby=h-invoices] td[data-label="Amount"]').first().textContent(),
    ).toBe('$12.50');
    const receipt = await eventuallyValue(
      async () => {
        const mail = await api().get<{ data: { subject: string; text: string }[] }>('/dev/mail', {
          query: { to: owner.email },
        });
        return mail.body.data.find((m) => m.subject.startsWith('Receipt:'));
      },
      (m) => m !== undefined,
      10_000,
    );
    expect(receipt!.subject).toMatch(/^Receipt: \$12\.50 for /);
    expect(receipt!.text).toContain('A top-up of $12.50');
    expect(receipt!.text).toContain('12,500 tokens · $12.50 added');
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    await context.close();
  });

  it('forms in error give their field the focus: rate limits, a new organization, the audit filter', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner, 390);
    await page.goto(`${suite.server.v2Url}/account/clients/${owner.clientId}/settings`);
    await page.getByLabel('Tokens per minute').fill('lots');
    await page.getByRole('button', { name: 'Save limits' }).click();
    await expect.poll(() => focusedId(page)).toBe('f-tpm');
    await expectAccessible(page);

    await page.goto(`${suite.server.v2Url}/account/audit-log?since=2026-13-45`);
    expect(await focusedId(page)).toBe('f-since');
    await expectAccessible(page);

    await page.goto(`${suite.server.v2Url}/account`);
    await page.getByLabel('New organization').fill(' ');
    await page.getByRole('button', { name: 'Create organization' }).click();
    await expect.poll(() => page.locator('#f-name-error').count()).toBe(1);
    expect(await focusedId(page)).toBe('f-name');
    await expectAccessible(page);
    await context.close();
  });
});
