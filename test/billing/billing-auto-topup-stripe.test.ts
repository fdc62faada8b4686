import { describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { useStripeServer } from '../helpers/stripe-server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { queryRows } from '../../src/db/client.js';
import { billingCustomers } from '../../src/db/schema.js';
import { runAutoTopups } from '../../src/billing/auto-topup.js';

// Against the stripe SDK and the local fake (STRIPE_API_BASE): the off-session
// PaymentIntent svc asks for (confirm, off_session, the default card, an idempotency key derived from the
// client and the crossing), the grant only from its payment_intent.succeeded, once, and a decline.

const { world, send } = useStripeServer('whsec_auto_topup_test');

async function ownerWithStripeCard(card: string): Promise<TestUser & { customerId: string }> {
  const owner = await createUser(world.server);
  const customerId = `cus_at_${owner.orgKey}`;
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
  await world.server.deps.db.insert(billingCustomers).values({ orgKey: owner.orgKey, customerId });
  await world.api.put(
    `/v1/clients/${owner.clientId}/auto-topup`,
    { trigger_credits: 5_000, amount_usd: 1_000, monthly_cap_usd: 5_000 },
    { token: owner.session },
  );
  return { ...owner, customerId };
}

async function crossTrigger(orgKey: string) {
  await setOrgBalance(world.server, orgKey, 6_000);
  await setOrgBalance(world.server, orgKey, 4_000);
  await runAutoTopups(world.server.deps);
  await runAutoTopups(world.server.deps);
}

const intentsFor = (customerId: string) =>
  world.fake.requests.filter(
    (r) => r.path === '/v1/payment_intents' && r.params.get('customer') === customerId,
  );

describe('auto top-up through Stripe (the SDK against the fake)', () => {
  it('one off-session PaymentIntent per crossing; the grant from its payment_intent.succeeded, once', async () => {
    const owner = await ownerWithStripeCard(`pm_ok_${Date.now()}`);
    await crossTrigger(owner.orgKey);
    const sent = intentsFor(owner.customerId);
    expect(sent).toHaveLength(1);
    const [crossing] = await queryRows<{ crossing_id: unknown; id: string }>(
      world.server.deps.db,
      sql`select crossing_id, id from auto_topup_charges where org_key = ${owner.orgKey}`,
    );
    expect(sent[0]!.idempotencyKey).toBe(`auto-topup:${owner.orgKey}:${String(crossing!.crossing_id)}`);
    expect(Object.fromEntries(sent[0]!.params)).toMatchObject({
      amount: '1000',
      currency: 'usd',
      confirm: 'true',
      off_session: 'true',
      payment_method: world.fake.paymentMethods.at(-1)!.id,
      'metadata[auto_topup_charge]': crossing!.id,
    });
    const intent = [...world.fake.paymentIntents.values()].find((p) => p.customer === owner.customerId)!;
    const grants = async () =>
      queryRows<{ amount: unknown }>(
        world.server.deps.db,
        sql`select amount from billing_entries where key like 'grant:autotopup:%' and to_account = ${`org:${owner.orgKey}`}`,
      );
    expect(await grants()).toHaveLength(0); // nothing before the processor says it was paid
    expect((await send('payment_intent.succeeded', intent)).status).toBe(200);
    expect((await send('payment_intent.succeeded', intent)).status).toBe(200); // a replay, new event id
    expect((await grants()).map((g) => Number(g.amount))).toEqual([10_000]);
  });

  it('a declined card (card_declined) turns auto top-up off and grants nothing', async () => {
    const card = `pm_declined_${Date.now()}`;
    world.fake.declinedMethods.add(card);
    const owner = await ownerWithStripeCard(card);
    await crossTrigger(owner.orgKey);
    expect(intentsFor(owner.customerId)).toHaveLength(1);
    const read = await world.api.get(`/v1/clients/${owner.clientId}/auto-topup`, { token: owner.session });
    expect(read.body).toMatchObject({
      enabled: false,
      disabled_reason: 'charge declined: Your card was declined.',
    });
  });
});
