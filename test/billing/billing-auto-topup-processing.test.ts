import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { useStripeServer } from '../helpers/stripe-server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import type { DevMail } from '../helpers/answers.js';
import { queryRows } from '../../src/db/client.js';
import { billingCustomers } from '../../src/db/schema.js';
import { runAutoTopups } from '../../src/billing/auto-topup.js';
import { checkInvariants } from '../../src/billing/invariants.js';

// A payment that fails late: the off-session PaymentIntent svc asks for (the stripe SDK
// against the fake) answers `processing` (a bank debit, say), Stripe sends payment_intent.processing and
// later payment_intent.payment_failed. Through the signed webhook: no tokens, the charge failed (out of
// the month's cap), auto top-up off with the reason, one topup.failed and one mail to the owner, however
// often the failure is delivered.

const { world, send } = useStripeServer('whsec_auto_topup_processing');

async function ownerWithBankDebit(): Promise<TestUser & { customerId: string; card: string }> {
  const owner = await createUser(world.server);
  const customerId = `cus_proc_${owner.orgKey}`;
  const card = `pm_debit_${owner.orgKey}`;
  world.fake.customers.set(customerId, {
    id: customerId,
    object: 'customer',
    invoice_settings: { default_payment_method: card },
  });
  world.fake.paymentMethods.push({
    id: card,
    object: 'payment_method',
    customer: customerId,
    type: 'card',
    card: { brand: 'visa', last4: '4242', exp_month: 12, exp_year: 2099 },
  });
  world.fake.processingMethods.add(card);
  await world.server.deps.db.insert(billingCustomers).values({ orgKey: owner.orgKey, customerId });
  const put = await world.api.put(
    `/v1/clients/${owner.clientId}/auto-topup`,
    { trigger_credits: 5_000, amount_usd: 1_000, monthly_cap_usd: 5_000 },
    { token: owner.session },
  );
  expect(put.status).toBe(200);
  return { ...owner, customerId, card };
}

const db = () => world.server.deps.db;

async function charge(orgKey: string) {
  const rows = await queryRows<{ status: string; failure: string | null; payment_intent: string | null }>(
    db(),
    sql`select status, failure, payment_intent from auto_topup_charges where org_key = ${orgKey}`,
  );
  expect(rows).toHaveLength(1);
  return rows[0]!;
}
const count = async (q: ReturnType<typeof sql>) => {
  const [row] = await queryRows<{ n: unknown }>(db(), q);
  return Number(row!.n);
};

describe('auto top-up: payment_intent.payment_failed after payment_intent.processing', () => {
  it('no grant, the charge failed and out of the cap, auto top-up off, the owner told once', async () => {
    const owner = await ownerWithBankDebit();
    await setOrgBalance(world.server, owner.orgKey, 6_000);
    await setOrgBalance(world.server, owner.orgKey, 4_000);
    await runAutoTopups(world.server.deps);
    await runAutoTopups(world.server.deps);

    const intent = [...world.fake.paymentIntents.values()].find((p) => p.customer === owner.customerId)!;
    expect(intent.status).toBe('processing');
    expect(await charge(owner.orgKey)).toMatchObject({ status: 'charged', payment_intent: intent.id });
    const settings = () =>
      world.api.get<{ enabled: boolean; disabled_reason: string | null; charged_this_month_usd: number }>(
        `/v1/clients/${owner.clientId}/auto-topup`,
        { token: owner.session },
      );
    // While processing, the charge counts against the month's cap and auto top-up stays on.
    expect((await settings()).body).toMatchObject({ enabled: true, charged_this_month_usd: 1_000 });

    const processing = await send('payment_intent.processing', intent);
    expect(processing.status).toBe(200);
    expect(await charge(owner.orgKey)).toMatchObject({ status: 'charged' });

    const failed = {
      ...intent,
      status: 'requires_payment_method',
      amount_received: 0,
      last_payment_error: {
        type: 'card_error',
        code: 'payment_method_customer_decline',
        message: 'The customer’s bank declined the debit.',
      },
    };
    const first = await send('payment_intent.payment_failed', failed);
    expect(first.status).toBe(200);
    // Stripe retries a delivery, and may send the event again under a new id: nothing more happens.
    const again = await send('payment_intent.payment_failed', failed);
    expect(again.status).toBe(200);

    expect(await charge(owner.orgKey)).toEqual({
      status: 'failed',
      failure: 'The customer’s bank declined the debit.',
      payment_intent: intent.id,
    });
    expect((await settings()).body).toMatchObject({
      enabled: false,
      disabled_reason: 'charge declined: The customer’s bank declined the debit.',
      charged_this_month_usd: 0,
    });
    expect(
      await count(
        sql`select count(*) as n from billing_entries where key like 'grant:autotopup:%' and to_account = ${`org:${owner.orgKey}`}`,
      ),
    ).toBe(0);
    expect(
      await count(
        sql`select count(*) as n from outbound_events where org_key = ${owner.orgKey} and type = 'topup.failed'`,
      ),
    ).toBe(1);
    const mails = await world.api.get<{ data: DevMail[] }>('/dev/mail', { query: { to: owner.email } });
    const told = mails.body.data.filter((m) => m.subject === 'Auto top-up failed');
    expect(told).toHaveLength(1);
    expect(told[0]!.text).toContain('bank declined the debit');
    // The link leads to the client's billing page (where auto top-up is turned on again), not a 404.
    expect(told[0]!.text).toContain(`/account/clients/${owner.clientId}/billing`);

    // Off: the next crossing asks the processor for nothing.
    await setOrgBalance(world.server, owner.orgKey, 6_000);
    await setOrgBalance(world.server, owner.orgKey, 4_000);
    await runAutoTopups(world.server.deps);
    expect(
      world.fake.requests.filter(
        (r) => r.path === '/v1/payment_intents' && r.params.get('customer') === owner.customerId,
      ),
    ).toHaveLength(1);
    expect(await checkInvariants(db())).toEqual([]);
  });

  it("another intent's payment_failed (a checkout's, or one svc never made) changes no auto top-up", async () => {
    const owner = await ownerWithBankDebit();
    const stray = await send('payment_intent.payment_failed', {
      id: 'pi_not_ours',
      object: 'payment_intent',
      amount: 1_000,
      amount_received: 0,
      currency: 'usd',
      customer: owner.customerId,
      status: 'requires_payment_method',
      metadata: {},
      last_payment_error: { code: 'card_declined', message: 'Your card was declined.' },
    });
    expect(stray.status).toBe(200);
    // One that names a charge of another customer is refused too.
    await setOrgBalance(world.server, owner.orgKey, 6_000);
    await setOrgBalance(world.server, owner.orgKey, 4_000);
    // Charged (its intent processing) by the second pass at the latest: a state the server's own poll
    // (every AUTO_TOPUP_POLL_MS) leaves alone, so only the event below could change it.
    await runAutoTopups(world.server.deps);
    await runAutoTopups(world.server.deps);
    const mine = await charge(owner.orgKey);
    expect(mine.status).toBe('charged');
    const forged = await send('payment_intent.payment_failed', {
      id: 'pi_forged',
      object: 'payment_intent',
      customer: 'cus_someone_else',
      status: 'requires_payment_method',
      metadata: {
        auto_topup_charge: `atu_${String((await queryRows<{ crossing_id: unknown }>(db(), sql`select crossing_id from auto_topup_charges where org_key = ${owner.orgKey}`))[0]!.crossing_id)}`,
      },
      last_payment_error: { code: 'card_declined' },
    });
    expect(forged.status).toBe(200);
    expect(await charge(owner.orgKey)).toEqual(mine);
    const read = await world.api.get(`/v1/clients/${owner.clientId}/auto-topup`, { token: owner.session });
    expect(read.body).toMatchObject({ enabled: true, disabled_reason: null });
  });
});
