import { beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import type { TestServer } from '../helpers/server.js';
import type { client } from '../helpers/http.js';
import { checkoutUrls, rid, useStripeServer } from '../helpers/stripe-server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import {
  deliverWebhook,
  proLines,
  signatureFor,
  stripeEvent,
  type FakeStripe,
} from '../helpers/fake-stripe.js';
import { queryRows } from '../../src/db/client.js';
import { checkInvariants } from '../../src/billing/invariants.js';

// Grants come only from what was paid (CONTRACT §8): signed events that name a session
// svc never created, an amount only in metadata, an invoice of another price or one paid nothing grant
// nothing; a signature dated in the future is refused like a stale one. Events signed by the stripe SDK.

const SECRET = 'whsec_test_secret_for_grants';
const stripe = useStripeServer(SECRET);
let fake: FakeStripe;
let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(() => {
  ({ fake, server, api } = stripe.world);
});

const send = stripe.send;
const balance = async (u: TestUser) =>
  (
    await api.get<{ balance_credits: number }>(`/v1/clients/${u.clientId}/credits/balance`, {
      token: u.session,
    })
  ).body.balance_credits;
const lifetime = async (u: TestUser) =>
  (await api.get<{ lifetime_granted_credits: number }>('/v1/owner/balance', { token: u.session })).body
    .lifetime_granted_credits;
const outcome = async (eventId: string) =>
  (
    await queryRows<{ outcome: string }>(
      server.deps.db,
      sql`select outcome from billing_webhook_events where id = ${eventId}`,
    )
  )[0]?.outcome;

async function topupSession(u: TestUser, cents: number) {
  const res = await api.post<{ session_id: string }>(
    `/v1/clients/${u.clientId}/credits/topup`,
    { amount_usd: cents, ...checkoutUrls },
    { token: u.session },
  );
  expect(res.status).toBe(200);
  return fake.sessions.get(res.body.session_id)!;
}

const proInvoice = (u: TestUser, customer: unknown, extra: Record<string, unknown> = {}) => ({
  id: rid('in'),
  object: 'invoice',
  customer,
  status: 'paid',
  billing_reason: 'subscription_cycle',
  amount_due: 20_000,
  amount_paid: 20_000,
  currency: 'usd',
  parent: {
    type: 'subscription_details',
    subscription_details: { subscription: rid('sub'), metadata: { org_key: u.orgKey } },
  },
  lines: proLines(),
  ...extra,
});

describe('grants only from what was paid', () => {
  it('a paid session svc never created grants nothing, whatever its metadata says', async () => {
    const u = await createUser(server);
    const known = await topupSession(u, 100); // maps the customer to the client
    const id = rid('evt');
    const res = await send(
      'checkout.session.completed',
      {
        id: rid('cs'),
        object: 'checkout.session',
        mode: 'payment',
        status: 'complete',
        payment_status: 'paid',
        customer: known.customer,
        amount_total: 100,
        currency: 'usd',
        metadata: { org_key: u.orgKey, kind: 'topup', credits: '999999999' },
      },
      { id },
    );
    expect(res.status).toBe(200);
    expect(await outcome(id)).toBe('unknown_session');
    expect(await balance(u)).toBe(50_000);
    expect(await lifetime(u)).toBe(50_000);
  });

  it("a session svc created grants amount_total at par, never metadata's credits", async () => {
    const u = await createUser(server);
    const s = await topupSession(u, 1_234);
    await send('checkout.session.completed', {
      ...s,
      status: 'complete',
      payment_status: 'paid',
      metadata: { ...(s.metadata as object), credits: '999999999' },
    });
    expect(await balance(u)).toBe(50_000 + 12_340);
    // A coupon that lowered the total lowers the grant; a 100%-off one grants nothing.
    const coupon = await topupSession(u, 5_000);
    await send('checkout.session.completed', {
      ...coupon,
      status: 'complete',
      payment_status: 'paid',
      amount_total: 1_000,
    });
    expect(await balance(u)).toBe(50_000 + 12_340 + 10_000);
    const free = await topupSession(u, 5_000);
    const freeEvent = rid('evt');
    await send(
      'checkout.session.completed',
      { ...free, status: 'complete', payment_status: 'paid', amount_total: 0 },
      { id: freeEvent },
    );
    expect(await outcome(freeEvent)).toBe('no_amount');
    expect(await lifetime(u)).toBe(50_000 + 22_340);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('invoice.paid grants a Pro period only for the Pro price with money paid', async () => {
    const u = await createUser(server);
    const s = await topupSession(u, 100);
    const zero = rid('evt');
    await send('invoice.paid', proInvoice(u, s.customer, { amount_paid: 0 }), { id: zero });
    expect(await outcome(zero)).toBe('nothing_paid');
    const other = rid('evt');
    await send('invoice.paid', proInvoice(u, s.customer, { lines: proLines(undefined, 'price_other') }), {
      id: other,
    });
    expect(await outcome(other)).toBe('not_pro_price');
    const none = rid('evt');
    await send('invoice.paid', proInvoice(u, s.customer, { lines: { object: 'list', data: [] } }), {
      id: none,
    });
    expect(await outcome(none)).toBe('not_pro_price');
    expect(await balance(u)).toBe(50_000);
    // The older line shape (lines[].price) is read too.
    await send(
      'invoice.paid',
      proInvoice(u, s.customer, { lines: { data: [{ price: { id: 'price_pro_test' } }] } }),
    );
    expect(await balance(u)).toBe(50_000 + 210_000);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });
});

describe('webhook signature timestamps', () => {
  it('refuses a signature dated more than 5 minutes ahead, as one more than 5 minutes old', async () => {
    const u = await createUser(server);
    const s = await topupSession(u, 100);
    const payload = stripeEvent('checkout.session.completed', {
      ...s,
      status: 'complete',
      payment_status: 'paid',
    });
    const now = Math.floor(Date.now() / 1000);
    for (const ahead of [365 * 24 * 3600, 301 + 5]) {
      const res = await deliverWebhook(server.url, payload, signatureFor(payload, SECRET, now + ahead));
      expect(res.status, `${ahead}s ahead`).toBe(400);
      expect(res.body?.detail?.code).toBe('INVALID_SIGNATURE');
    }
    expect(await balance(u)).toBe(50_000);
    // Within the tolerance (a clock a little ahead) it is accepted.
    const ok = await deliverWebhook(server.url, payload, signatureFor(payload, SECRET, now + 120));
    expect(ok.status).toBe(200);
    expect(await balance(u)).toBe(51_000);
  });
});
