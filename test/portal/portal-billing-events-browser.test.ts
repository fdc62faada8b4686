import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addMember, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { eventually } from '../helpers/eventually.js';
import { signatureValid, startReceiver, type Receiver } from '../helpers/webhook-receiver.js';
import {
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  browserSuite,
  signedIn,
} from '../helpers/browser.js';
import { getBalanceAlert } from '../../src/billing/balance-alerts.js';
import { listEndpoints } from '../../src/events/endpoints.js';

// On the billing page, in a real browser: the owner sets the low-balance alert,
// adds a webhook endpoint by POST/redirect/GET (its secret shown once, on the GET; a reload neither adds
// a second endpoint nor shows the secret again), sees its recent deliveries and removes it; a mistake is
// said in words next to its field; a member's forged POST is 403. axe-core on every state, 390 px check.

const RETRY_BASE_MS = 800;
const suite = browserSuite({ env: { WEBHOOK_RETRY_BASE_MS: String(RETRY_BASE_MS) } });
let owner: TestUser;
let member: TestUser;
let receiver: Receiver;
let shownSecret = '';

beforeAll(async () => {
  if (!haveChromium) return;
  owner = await createUser(suite.server, { name: 'Ada Owner' });
  member = await createUser(suite.server, { name: 'Bo Member' });
  await addMember(suite.server, owner.orgKey, member.userId, 'member');
  receiver = await startReceiver();
  receiver.status = (n) => (n === 0 ? 500 : 200);
});
afterAll(async () => {
  await receiver?.close();
});

const billingUrl = (clientId: string) => `${suite.server.v2Url}/account/clients/${clientId}/billing`;
const countEndpoints = async () => (await listEndpoints(suite.server.deps.db, owner.orgKey)).data.length;

describe.skipIf(!haveChromium)('the billing page: alerts and webhook endpoints', () => {
  it('sets the alert; a mistake is shown next to its field on the billing page', async () => {
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
    expect(await page.locator('main').textContent()).toContain('On, below 5,000 tokens · $5.00 and at 0.');

    await page.getByLabel(/Alert me below this many tokens/).fill('lots');
    await page.getByRole('button', { name: 'Save the alert' }).click();
    await page.waitForLoadState();
    // The billing page itself, the field marked invalid and described by the message, the typed value kept.
    const field = page.getByLabel(/Alert me below this many tokens/);
    expect(await field.getAttribute('aria-invalid')).toBe('true');
    expect(await field.inputValue()).toBe('lots');
    expect(await page.locator('#f-threshold-error').textContent()).toContain('whole number of tokens');
    expect(await field.getAttribute('aria-describedby')).toContain('f-threshold-error');
    expect(await page.getByRole('heading', { name: 'Invoices' }).count()).toBe(1);
    await expectAccessible(page);
    expect(await getBalanceAlert(suite.server.deps.db, owner.orgKey)).toMatchObject({
      threshold_credits: 5_000,
    });
    await context.close();
  });

  it('adds an endpoint by POST/redirect/GET: the secret shown once, a reload adds nothing and hides it', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner);
    await page.goto(billingUrl(owner.clientId));
    await page.getByLabel('URL', { exact: true }).fill('https://hooks.example/svc');
    await page.getByRole('button', { name: 'Add the endpoint' }).click();
    await page.waitForLoadState();
    // No event chosen: said on the page, nothing added.
    expect(
      await page.locator('section[aria-labelledby="h-hooks"] [role="alert"]').first().textContent(),
    ).toContain('Choose at least one event');
    expect(await countEndpoints()).toBe(0);
    await expectAccessible(page);

    await page.getByLabel('URL', { exact: true }).fill(receiver.url);
    await page.getByLabel('balance.low', { exact: true }).check();
    await page.getByLabel('topup.succeeded', { exact: true }).check();
    await page.getByRole('button', { name: 'Add the endpoint' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'endpoint_added');
    const secret = await page.locator('main code').textContent();
    expect(secret).toMatch(/^whsec_/);
    expect(await countEndpoints()).toBe(1);
    await expectAccessible(page);

    // The answer to the POST was a redirect: a reload is a GET, adds nothing, and the secret is gone.
    await page.reload();
    await page.waitForLoadState();
    expect(await countEndpoints()).toBe(1);
    expect(await page.locator('main code').count()).toBe(0);
    const main = (await page.locator('main').textContent()) ?? '';
    expect(main).toContain(receiver.url);
    expect(main).toContain('balance.low, topup.succeeded');
    expect(main).not.toContain(secret!);
    // Another session of the same owner never sees it either.
    const other = await signedIn(suite.browser, suite.server.v2Url, owner);
    await other.page.goto(billingUrl(owner.clientId));
    expect(await other.page.locator('main code').count()).toBe(0);
    await other.context.close();
    await expectAccessible(page);

    // The secret shown is the one svc signs with: the receiver checks a delivery with it (below).
    shownSecret = secret!;
    await context.close();
  });

  it("shows each endpoint's recent deliveries (event, status, attempts, last error), then removes it", async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner);
    // The balance falls below the 5,000-token alert: one balance.low, refused once (500), then delivered.
    await setOrgBalance(suite.server, owner.orgKey, 10_000);
    await setOrgBalance(suite.server, owner.orgKey, 4_000);
    await eventually(() => receiver.received.length >= 1, 30_000);
    await page.goto(billingUrl(owner.clientId));
    const table = page.getByRole('table', { name: `Recent deliveries to ${receiver.url}` });
    const firstRow = table.locator('tbody tr').first();
    // Either still pending after the 500, or already retried: the log says which, in words.
    await eventually(async () => {
      await page.reload();
      const text = (await firstRow.textContent()) ?? '';
      return /delivered/.test(text);
    }, 30_000);
    const cells = await firstRow.locator('td').allTextContents();
    expect(cells[1]).toContain('balance.low');
    expect(cells[2]).toBe('delivered');
    expect(cells[3]).toBe('2');
    expect(cells[4]).toBe('—');
    expect(
      signatureValid(shownSecret, receiver.received[1]!.headers['svc-signature'], receiver.received[1]!.body),
    ).toBe(true);
    await expectAccessible(page);

    await page.getByRole('button', { name: `Remove the endpoint ${receiver.url}` }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'endpoint_removed');
    expect(await countEndpoints()).toBe(0);
    await page.setViewportSize({ width: 390, height: 800 });
    await expectNoSidewaysScroll(page);
    await context.close();
  });

  it('a member sees no owner cards and a POST of theirs is refused on the page (403), changing nothing', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, member);
    await page.goto(billingUrl(owner.clientId));
    expect(await page.getByRole('heading', { name: 'Webhook endpoints' }).count()).toBe(0);
    expect(await page.getByRole('heading', { name: 'Low-balance alert' }).count()).toBe(0);
    // The member posts the owner's form from their own session, with their own valid CSRF pair.
    // (No form of this page has one: the pair is the browser's CSRF cookie, set at sign-in.)
    const csrf = (await context.cookies()).find((c) => c.name === '__Host-svc_csrf')!.value;
    const answer = await page.request.post(`${billingUrl(owner.clientId)}/webhook-endpoints`, {
      form: { csrf_token: csrf, url: 'https://evil.example/x', events: 'balance.low' },
      maxRedirects: 0,
    });
    const status = { status: answer.status(), text: await answer.text() };
    expect(status.status).toBe(403);
    expect(status.text).toContain('Only the organization');
    expect(await countEndpoints()).toBe(0);
    await context.close();
  });
});
