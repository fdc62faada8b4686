import { beforeAll, describe, expect, it } from 'vitest';
import type { TestServer } from '../helpers/server.js';
import type { client } from '../helpers/http.js';
import { checkoutUrls, useStripeServer } from '../helpers/stripe-server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import {
  deliverWebhook,
  proLines,
  signatureFor,
  stripeEvent,
  type FakeStripe,
} from '../helpers/fake-stripe.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import type {
  Checkout,
  ClientBalance,
  Invoice,
  LedgerEntry,
  OwnerBalance,
  PaymentMethod,
  Subscription,
} from '../helpers/answers.js';
import { anyOf, containing, detailOf, matching } from '../helpers/json.js';

// Stripe through the real SDK against a local fake (CONTRACT §8: STRIPE_API_BASE), and the webhook
// with signatures made by stripe.webhooks.generateTestHeaderString.

const SECRET = 'whsec_test_secret_for_billing';
const stripe = useStripeServer(SECRET);
let fake: FakeStripe;
let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(() => {
  ({ fake, server, api } = stripe.world);
});

const urls = checkoutUrls;
const send = stripe.send;
const balance = async (u: TestUser) =>
  (await api.get<ClientBalance>(`/v1/clients/${u.clientId}/credits/balance`, { token: u.session })).body
    .balance_credits;

async function topupSession(u: TestUser, cents: number) {
  const res = await api.post<Checkout>(
    `/v1/clients/${u.clientId}/credits/topup`,
    { amount_usd: cents, ...urls },
    { token: u.session },
  );
  expect(res.status).toBe(200);
  return fake.sessions.get(res.body.session_id)!;
}

describe('checkout through the Stripe SDK', () => {
  it('creates one customer per client and a payment-mode session priced at amount_usd cents', async () => {
    const u = await createUser(server);
    const first = await topupSession(u, 1_000);
    await topupSession(u, 2_500);
    const customerCalls = fake.requests.filter(
      (r) => r.path === '/v1/customers' && r.params.get('metadata[org_key]') === u.orgKey,
    );
    expect(customerCalls).toHaveLength(1);
    expect(customerCalls[0]!.idempotencyKey).toBe(`customer:${u.orgKey}`);
    const call = fake.requests.filter((r) => r.path === '/v1/checkout/sessions').at(-2)!;
    expect(call.params.get('mode')).toBe('payment');
    expect(call.params.get('line_items[0][price_data][unit_amount]')).toBe('1000');
    expect(call.params.get('customer')).toBe(first.customer);
    expect(first.url).toMatch(/^https:\/\/checkout\.stripe\.test\//);
  });

  it('starts a Pro subscription checkout with STRIPE_PRICE_PRO and refuses another price', async () => {
    const u = await createUser(server);
    const res = await api.post<Checkout>(
      `/v1/clients/${u.clientId}/subscription/checkout`,
      { price_id: 'price_pro_test', ...urls },
      { token: u.session },
    );
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      session_id: matching(/^cs_test_/),
      checkout_url: matching(/^https:/),
    });
    const call = fake.requests.filter((r) => r.path === '/v1/checkout/sessions').at(-1)!;
    expect(call.params.get('mode')).toBe('subscription');
    expect(call.params.get('line_items[0][price]')).toBe('price_pro_test');
    const wrong = await api.post<Checkout>(
      `/v1/clients/${u.clientId}/subscription/checkout`,
      { price_id: 'price_other', ...urls },
      { token: u.session },
    );
    expect(wrong.status).toBe(400);
  });

  it('a new Pro checkout expires the older one still open at Stripe; one paid meanwhile refuses it (409)', async () => {
    const u = await createUser(server);
    const first = await api.post<Checkout>(`/v1/clients/${u.clientId}/subscription/checkout`, urls, {
      token: u.session,
    });
    const second = await api.post<Checkout>(`/v1/clients/${u.clientId}/subscription/checkout`, urls, {
      token: u.session,
    });
    expect([first.status, second.status]).toEqual([200, 200]);
    expect(
      fake.requests.filter(
        (r) => r.method === 'POST' && r.path === `/v1/checkout/sessions/${first.body.session_id}/expire`,
      ),
    ).toHaveLength(1);
    expect(fake.sessions.get(first.body.session_id)!.status).toBe('expired');
    expect(fake.sessions.get(second.body.session_id)!.status).toBe('open');
    // The second is paid at Stripe; its webhooks have not arrived yet. A third checkout is refused.
    fake.sessions.get(second.body.session_id)!.status = 'complete';
    const third = await api.post<Checkout>(`/v1/clients/${u.clientId}/subscription/checkout`, urls, {
      token: u.session,
    });
    expect(third.status).toBe(409);
    expect(detailOf(third.body).code).toBe('ALREADY_SUBSCRIBED');
  });

  it('maps a declined card to 402 payment_failed and an unreachable processor to 502', async () => {
    const u = await createUser(server);
    fake.failNext = {
      status: 402,
      error: { type: 'card_error', code: 'card_declined', message: 'Your card was declined.' },
    };
    const declined = await api.post<Checkout>(
      `/v1/clients/${u.clientId}/credits/topup`,
      { amount_usd: 500, ...urls },
      { token: u.session },
    );
    expect(declined.status).toBe(402);
    expect(detailOf(declined.body).code).toBe('payment_failed');
    fake.failNext = { status: 400, error: { type: 'invalid_request_error', message: 'bad' } };
    const broken = await api.post<Checkout>(
      `/v1/clients/${u.clientId}/credits/topup`,
      { amount_usd: 500, ...urls },
      { token: u.session },
    );
    expect(broken.status).toBe(502);
  });

  it('opens the billing portal and lists payment methods from Stripe', async () => {
    const u = await createUser(server);
    const portal = await api.post<{ portal_url: string }>(
      `/v1/clients/${u.clientId}/billing/portal`,
      { return_url: 'https://app.example/billing' },
      { token: u.session },
    );
    expect(portal.status).toBe(200);
    expect(portal.body.portal_url).toMatch(/^https:\/\/billing\.stripe\.test\//);
    const customer = fake.requests
      .filter((r) => r.path === '/v1/billing_portal/sessions')
      .at(-1)!
      .params.get('customer')!;
    fake.paymentMethods.push({
      id: 'pm_card_1',
      object: 'payment_method',
      customer,
      type: 'card',
      card: { brand: 'visa', last4: '4242', exp_month: 4, exp_year: 2030 },
    });
    (
      fake.customers.get(customer)!.invoice_settings as { default_payment_method: string | null }
    ).default_payment_method = 'pm_card_1';
    const pms = await api.get<PaymentMethod[]>(`/v1/clients/${u.clientId}/payment-methods`, {
      token: u.session,
    });
    expect(pms.body).toEqual([
      {
        id: 'pm_card_1',
        org_id: u.clientId,
        type: 'card',
        brand: 'visa',
        last4: '4242',
        exp_month: 4,
        exp_year: 2030,
        is_default: true,
      },
    ]);
  });
});

describe('POST /v1/webhooks/stripe', () => {
  it('refuses a bad signature, a stale timestamp and a missing header with 400, without auth', async () => {
    const payload = stripeEvent('invoice.paid', { id: 'in_x' });
    expect((await deliverWebhook(server.url, payload, signatureFor(payload, 'whsec_wrong'))).status).toBe(
      400,
    );
    const stale = signatureFor(payload, SECRET, Math.floor(Date.now() / 1000) - 3_600);
    expect((await deliverWebhook(server.url, payload, stale)).status).toBe(400);
    // A body changed after signing (one byte) fails too: the check is over the raw bytes.
    expect(
      (await deliverWebhook(server.url, payload.replace('in_x', 'in_y'), signatureFor(payload, SECRET)))
        .status,
    ).toBe(400);
    const none = await fetch(`${server.url}/v1/webhooks/stripe`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: payload,
    });
    expect(none.status).toBe(400);
  });

  it('answers a signed event carrying a NUL character with 400 INVALID_EVENT, never 500', async () => {
    for (const payload of [
      stripeEvent('customer.updated', { id: 'cus_nul', name: 'a\u0000b' }),
      stripeEvent('checkout.session.completed', {
        id: 'cs_\u0000x',
        status: 'complete',
        payment_status: 'paid',
      }),
    ]) {
      const res = await deliverWebhook(server.url, payload, signatureFor(payload, SECRET));
      expect(res.status).toBe(400);
      expect(res.body?.detail?.code).toBe('INVALID_EVENT');
    }
  });

  it('grants a paid top-up once, whatever the repeats, replays and concurrent duplicates', async () => {
    const u = await createUser(server);
    const s = await topupSession(u, 1_234);
    const object = { ...s, status: 'complete', payment_status: 'paid' };
    const payload = stripeEvent('checkout.session.completed', object);
    const sig = signatureFor(payload, SECRET);
    const results = await Promise.all(
      Array.from({ length: 8 }, () => deliverWebhook(server.url, payload, sig)),
    );
    expect(results.map((r) => r.status)).toEqual(Array(8).fill(200));
    expect(results.filter((r) => r.body?.duplicate === false)).toHaveLength(1);
    // The same session under other event ids (a replay, the async success event) grants nothing more.
    expect((await send('checkout.session.completed', object)).status).toBe(200);
    expect((await send('checkout.session.async_payment_succeeded', object)).status).toBe(200);
    expect(await balance(u)).toBe(50_000 + 12_340);
    const tx = await api.get<LedgerEntry[]>(`/v1/clients/${u.clientId}/credits/transactions`, {
      token: u.session,
    });
    expect(tx.body[0]).toMatchObject({
      transaction_type: 'topup',
      amount_credits: 12_340,
      balance_after_credits: 62_340,
      org_id: u.clientId,
    });
    const owner = await api.get<OwnerBalance>('/v1/owner/balance', { token: u.session });
    expect(owner.body.lifetime_granted_credits).toBe(62_340);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('verifies over the exact bytes Stripe sent (pretty-printed, non-ASCII), not a re-serialisation', async () => {
    const u = await createUser(server);
    const s = await topupSession(u, 200);
    const pretty = JSON.stringify(
      JSON.parse(
        stripeEvent('checkout.session.completed', {
          ...s,
          payment_status: 'paid',
          status: 'complete',
          description: 'Crédits — “svc” ✓',
        }),
      ),
      null,
      2,
    );
    const res = await deliverWebhook(server.url, pretty, signatureFor(pretty, SECRET));
    expect(res.status).toBe(200);
    expect(await balance(u)).toBe(52_000);
  });

  it('waits for async payment: an unpaid completed session grants nothing until async_payment_succeeded', async () => {
    const u = await createUser(server);
    const s = await topupSession(u, 100);
    await send('checkout.session.completed', { ...s, status: 'complete', payment_status: 'unpaid' });
    expect(await balance(u)).toBe(50_000);
    await send('checkout.session.async_payment_succeeded', {
      ...s,
      status: 'complete',
      payment_status: 'paid',
    });
    expect(await balance(u)).toBe(51_000);
  });

  it('grants a subscription period on invoice.paid delivered before customer.subscription.created', async () => {
    const u = await createUser(server);
    const s = await topupSession(u, 100); // creates the customer mapping
    const customer = s.customer as string;
    const t0 = Math.floor(Date.now() / 1000);
    const sub = {
      id: 'sub_ooo_' + u.orgKey,
      object: 'subscription',
      customer,
      status: 'active',
      cancel_at_period_end: false,
      metadata: { org_key: u.orgKey },
      items: { data: [{ current_period_start: t0, current_period_end: t0 + 2_592_000 }] },
    };
    const invoice = {
      id: 'in_ooo_' + u.orgKey,
      object: 'invoice',
      customer,
      status: 'paid',
      billing_reason: 'subscription_create',
      amount_due: 20_000,
      amount_paid: 20_000,
      currency: 'usd',
      created: t0,
      invoice_pdf: 'https://pay.stripe.test/in.pdf',
      parent: {
        type: 'subscription_details',
        subscription_details: { subscription: sub.id, metadata: { org_key: u.orgKey } },
      },
      lines: proLines({ start: t0, end: t0 + 2_592_000 }),
    };
    expect((await send('invoice.paid', invoice, { created: t0 + 2 })).status).toBe(200);
    expect(await balance(u)).toBe(50_000 + 210_000);
    // The older creation event arrives late: still active; a later update is applied.
    await send('customer.subscription.created', { ...sub, status: 'incomplete' }, { created: t0 });
    let got = await api.get<Subscription>(`/v1/clients/${u.clientId}/subscription`, { token: u.session });
    expect(got.body).toEqual({
      org_id: u.clientId,
      plan_name: 'pro',
      status: 'active',
      current_period_start: t0,
      current_period_end: t0 + 2_592_000,
      cancel_at_period_end: false,
      payment_subscription_id: sub.id,
    });
    await send('customer.subscription.updated', { ...sub, cancel_at_period_end: true }, { created: t0 + 5 });
    got = await api.get<Subscription>(`/v1/clients/${u.clientId}/subscription`, { token: u.session });
    expect(got.body.cancel_at_period_end).toBe(true);
    // A renewal grants again; a replay of either invoice does not.
    await send(
      'invoice.paid',
      { ...invoice, id: invoice.id + '_2', billing_reason: 'subscription_cycle' },
      { created: t0 + 6 },
    );
    await send('invoice.paid', invoice, { created: t0 + 7 });
    expect(await balance(u)).toBe(50_000 + 420_000);
    const tx = await api.get<LedgerEntry[]>(`/v1/clients/${u.clientId}/credits/transactions`, {
      token: u.session,
    });
    expect(
      tx.body.filter((t: { transaction_type: string }) => t.transaction_type === 'subscription_credit'),
    ).toHaveLength(2);
    const invoices = await api.get<Invoice[]>(`/v1/clients/${u.clientId}/invoices`, { token: u.session });
    expect(invoices.body[0]).toMatchObject({
      org_id: u.clientId,
      status: 'paid',
      currency: 'usd',
      amount_paid_cents: 20_000,
      due_date: anyOf(Number),
    });
    await send('customer.subscription.deleted', { ...sub, status: 'canceled' }, { created: t0 + 9 });
    got = await api.get<Subscription>(`/v1/clients/${u.clientId}/subscription`, { token: u.session });
    expect(got.status).toBe(404);
    expect(detailOf(got.body).code).toBe('subscription_not_found');
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('records invoice.payment_failed visibly, without granting', async () => {
    const u = await createUser(server);
    const s = await topupSession(u, 100);
    await send('invoice.payment_failed', {
      id: 'in_fail_' + u.orgKey,
      object: 'invoice',
      customer: s.customer,
      status: 'open',
      billing_reason: 'subscription_cycle',
      amount_due: 20_000,
      amount_paid: 0,
      currency: 'usd',
      created: 1_700_000_000,
    });
    const invoices = await api.get<Invoice[]>(`/v1/clients/${u.clientId}/invoices`, { token: u.session });
    expect(invoices.body).toEqual([
      containing({
        id: 'in_fail_' + u.orgKey,
        status: 'open',
        amount_paid_cents: 0,
        payment_failed: true,
      }),
    ]);
    expect(await balance(u)).toBe(50_000);
  });

  it('answers 5xx when processing really fails, keeping nothing, so the retry applies it', async () => {
    const u = await createUser(server);
    const s = await topupSession(u, 300);
    const id = 'evt_retry_' + u.orgKey;
    // A value the database refuses makes the effect fail inside the transaction.
    const broken = await send(
      'invoice.paid',
      {
        id: 'in_retry_' + u.orgKey,
        customer: s.customer,
        status: 'paid',
        billing_reason: 'subscription_cycle',
        amount_due: 'not a number',
        lines: proLines(),
        currency: 'usd',
      },
      { id },
    );
    expect(broken.status).toBe(500);
    expect(await balance(u)).toBe(50_000);
    const retried = await send(
      'invoice.paid',
      {
        id: 'in_retry_' + u.orgKey,
        customer: s.customer,
        status: 'paid',
        billing_reason: 'subscription_cycle',
        amount_due: 20_000,
        amount_paid: 20_000,
        lines: proLines(),
        currency: 'usd',
      },
      { id },
    );
    expect(retried.body).toEqual({ received: true, duplicate: false });
    expect(await balance(u)).toBe(260_000);
  });

  it('acknowledges events it does not handle and events for unknown customers', async () => {
    expect((await send('customer.created', { id: 'cus_zzz' })).body).toEqual({
      received: true,
      duplicate: false,
    });
    expect(
      (
        await send('invoice.paid', {
          id: 'in_unknown',
          customer: 'cus_unknown',
          billing_reason: 'subscription_cycle',
        })
      ).status,
    ).toBe(200);
  });
});
