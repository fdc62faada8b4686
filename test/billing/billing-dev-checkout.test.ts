import { beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer, PRODUCTION_ENV } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { clientBalance, openDevPage, postDevForm, useTestServer } from '../helpers/billing-world.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import type { Checkout, Invoice, LedgerEntry, PaymentMethod, Subscription } from '../helpers/answers.js';
import { containing, matching, type DetailError } from '../helpers/json.js';

// The dev processor end to end (CONTRACT §8): checkout_url → a plain HTML form → decision=pay|fail →
// signed events through the webhook code → redirect to success_url / cancel_url.

const world = useTestServer();
let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(() => {
  ({ server, api } = world);
});

const urls = {
  success_url: 'https://app.example/ok?session={CHECKOUT_SESSION_ID}',
  cancel_url: 'https://app.example/cancel',
};

/** Opens the checkout page like a browser: its cookie, CSRF field and form action. */
async function openForm(checkoutUrl: string) {
  const form = await openDevPage(checkoutUrl);
  expect(form.csrf && form.action).toBeTruthy();
  return { cookie: form.cookie, csrf: form.csrf!, action: form.action! };
}

const post = (form: Awaited<ReturnType<typeof openForm>>, decision: string) =>
  postDevForm(form, { csrf_token: form.csrf, decision });

async function submit(checkoutUrl: string, decision: string) {
  return post(await openForm(checkoutUrl), decision);
}

const balance = (u: TestUser) => clientBalance(world, u);

describe('dev checkout', () => {
  it('buys tokens end to end: top-up form, signed webhook, grant, invoice, card, redirect', async () => {
    const u = await createUser(server);
    const start = await api.post<Checkout>(
      `/v1/clients/${u.clientId}/credits/topup`,
      { amount_usd: 2_000, ...urls },
      { token: u.session },
    );
    expect(start.status).toBe(200);
    expect(start.body.checkout_url).toBe(`${server.v2Url}/dev/checkout/${start.body.session_id}`);
    const page = await fetch(start.body.checkout_url);
    expect(page.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    expect(await page.text()).toContain('20,000 tokens');
    const form = await openForm(start.body.checkout_url);
    const done = await post(form, 'pay');
    expect(done.status).toBe(303);
    expect(done.headers.get('location')).toBe(`https://app.example/ok?session=${start.body.session_id}`);
    expect(await balance(u)).toBe(70_000);
    const tx = await api.get<LedgerEntry[]>(`/v1/clients/${u.clientId}/credits/transactions`, {
      token: u.session,
    });
    expect(tx.body[0]).toMatchObject({
      transaction_type: 'topup',
      amount_credits: 20_000,
      balance_after_credits: 70_000,
    });
    const invoices = await api.get<Invoice[]>(`/v1/clients/${u.clientId}/invoices`, { token: u.session });
    expect(invoices.body).toEqual([
      containing({
        amount_paid_cents: 2_000,
        status: 'paid',
        currency: 'usd',
        org_id: u.clientId,
      }),
    ]);
    const pms = await api.get<PaymentMethod[]>(`/v1/clients/${u.clientId}/payment-methods`, {
      token: u.session,
    });
    expect(pms.body).toEqual([containing({ type: 'card', brand: 'visa', last4: '4242', is_default: true })]);
    // The session is single-use: a second submission (even two at once) changes nothing.
    const again = await Promise.all([post(form, 'pay'), post(form, 'pay')]);
    expect(again.map((r) => r.status)).toEqual([409, 409]);
    expect(await (await fetch(start.body.checkout_url)).text()).not.toContain('<form method="post"');
    expect(await balance(u)).toBe(70_000);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('a new Pro checkout closes the older one still open, so that only one can be paid (one subscription, one charge)', async () => {
    const u = await createUser(server);
    const first = await api.post<Checkout>(`/v1/clients/${u.clientId}/subscription/checkout`, urls, {
      token: u.session,
    });
    const firstPage = await openForm(first.body.checkout_url); // left open in a tab
    const second = await api.post<Checkout>(`/v1/clients/${u.clientId}/subscription/checkout`, urls, {
      token: u.session,
    });
    expect([first.status, second.status]).toEqual([200, 200]);
    expect((await post(firstPage, 'pay')).status).toBe(409); // "This checkout is already closed."
    expect(await (await fetch(first.body.checkout_url)).text()).not.toContain('<form');
    expect(await balance(u)).toBe(50_000);
    expect((await submit(second.body.checkout_url, 'pay')).status).toBe(303);
    expect(await balance(u)).toBe(260_000);
    expect(
      (await api.get<Subscription>(`/v1/clients/${u.clientId}/subscription`, { token: u.session })).body
        .status,
    ).toBe('active');
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('starts a Pro subscription: 210,000 tokens, subscription state, portal page', async () => {
    const u = await createUser(server);
    const start = await api.post<Checkout>(
      `/v1/clients/${u.clientId}/subscription/checkout`,
      { price_id: 'price_pro', ...urls },
      { token: u.session },
    );
    expect(start.status).toBe(200);
    expect((await submit(start.body.checkout_url, 'pay')).status).toBe(303);
    expect(await balance(u)).toBe(260_000);
    const sub = await api.get<Subscription>(`/v1/clients/${u.clientId}/subscription`, { token: u.session });
    expect(sub.body).toMatchObject({
      org_id: u.clientId,
      plan_name: 'pro',
      status: 'active',
      cancel_at_period_end: false,
      payment_subscription_id: matching(/^sub_dev_/),
    });
    expect(sub.body.current_period_end - sub.body.current_period_start).toBe(30 * 24 * 3600);
    const again = await api.post<Checkout>(`/v1/clients/${u.clientId}/subscription/checkout`, urls, {
      token: u.session,
    });
    expect(again.status).toBe(409);
    const portal = await api.post<{ portal_url: string }>(
      `/v1/clients/${u.clientId}/billing/portal`,
      { return_url: 'https://app.example/b' },
      { token: u.session },
    );
    const portalPage = await fetch(portal.body.portal_url);
    expect(portalPage.status).toBe(200);
    expect(await portalPage.text()).toContain(sub.body.payment_subscription_id);
    // The portal's own actions go through the webhook code too: a renewal grants the next period once.
    const portalForm = await openForm(portal.body.portal_url);
    const act = (action: string) =>
      postDevForm(portalForm, {
        csrf_token: portalForm.csrf,
        action,
        subscription: sub.body.payment_subscription_id,
      });
    expect((await act('renew')).status).toBe(303);
    expect(await balance(u)).toBe(470_000);
    const renewed = await api.get<Subscription>(`/v1/clients/${u.clientId}/subscription`, {
      token: u.session,
    });
    expect(renewed.body.current_period_start).toBe(sub.body.current_period_end);
    expect((await act('cancel')).status).toBe(303);
    expect(
      (await api.get<Subscription>(`/v1/clients/${u.clientId}/subscription`, { token: u.session })).body
        .cancel_at_period_end,
    ).toBe(true);
    expect(
      (await api.get<Invoice[]>(`/v1/clients/${u.clientId}/invoices`, { token: u.session })).body,
    ).toHaveLength(2);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('a declined card grants nothing, records the failed invoice and goes to cancel_url', async () => {
    const u = await createUser(server);
    const start = await api.post<Checkout>(
      `/v1/clients/${u.clientId}/credits/topup`,
      { amount_usd: 500, ...urls },
      { token: u.session },
    );
    const res = await submit(start.body.checkout_url, 'fail');
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe('https://app.example/cancel');
    expect(await balance(u)).toBe(50_000);
    const invoices = await api.get<Invoice[]>(`/v1/clients/${u.clientId}/invoices`, { token: u.session });
    expect(invoices.body).toEqual([
      containing({ status: 'open', amount_paid_cents: 0, payment_failed: true }),
    ]);
  });

  it('refuses a form without its CSRF pair and an unknown session', async () => {
    const u = await createUser(server);
    const start = await api.post<Checkout>(
      `/v1/clients/${u.clientId}/credits/topup`,
      { amount_usd: 500, ...urls },
      { token: u.session },
    );
    const forged = await fetch(start.body.checkout_url, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'decision=pay',
      redirect: 'manual',
    });
    expect(forged.status).toBe(403);
    expect(await balance(u)).toBe(50_000);
    expect((await fetch(`${server.v2Url}/dev/checkout/cs_dev_nope`)).status).toBe(404);
    // Ids of another shape name nothing and are refused before any query.
    for (const path of [
      '/dev/checkout/cs%20dev',
      '/dev/portal/cus-dev!',
      `/dev/invoices/${'x'.repeat(200)}`,
    ]) {
      expect((await fetch(`${server.v2Url}${path}`)).status, path).toBe(404);
    }
  });

  it('is absent in production mode', async () => {
    const prod = await startTestServer({ env: PRODUCTION_ENV });
    try {
      expect((await fetch(`${prod.url}/dev/checkout/cs_dev_x`)).status).toBe(404);
      const u = await createUser(prod);
      const res = await client(prod.url).post<DetailError>(
        `/v1/clients/${u.clientId}/credits/topup`,
        { amount_usd: 500, ...urls },
        { token: u.session },
      );
      expect(res.status).toBe(503);
      expect(res.body.detail.code).toBe('PAYMENTS_NOT_CONFIGURED');
      const hook = await fetch(`${prod.url}/v1/webhooks/stripe`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'stripe-signature': 't=1,v1=x' },
        body: '{}',
      });
      expect(hook.status).toBe(503);
    } finally {
      await prod.close();
    }
  });
});
