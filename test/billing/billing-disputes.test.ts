import { beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import type { TestServer } from '../helpers/server.js';
import type { client } from '../helpers/http.js';
import {
  clientBalance,
  openDevPage,
  payDevTopup,
  postDevForm,
  useTestServer,
} from '../helpers/billing-world.js';
import { checkoutUrls, rid, useStripeServer } from '../helpers/stripe-server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { deliverWebhook, signatureFor, stripeEvent, type FakeStripe } from '../helpers/fake-stripe.js';
import { queryRows } from '../../src/db/client.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { reconcile } from '../../src/billing/reconcile.js';
import { reserveCredits, settleCredits, voidHold } from '../../src/billing/spend.js';
import type {
  Checkout,
  ClientBalance,
  CreatedClient,
  Invoice,
  LedgerEntry,
  OwnerBalance,
} from '../helpers/answers.js';
import { containing } from '../helpers/json.js';

// Disputes (src/billing/disputes.ts): the funds leaving take back the payment's tokens in proportion to
// the disputed amount, once per dispute; a win gives exactly that back, once; in any delivery order.
// Signed webhooks against the real server, checkout sessions made by the real SDK against the fake.

const SECRET = 'whsec_test_secret_for_disputes';
const stripe = useStripeServer(SECRET);
let fake: FakeStripe;
let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(() => {
  ({ fake, server, api } = stripe.world);
});

const urls = checkoutUrls;
const { send, balance, pool, transactions, outcome, topup } = stripe;
const disputeRow = async (id: string) =>
  (
    await queryRows<Record<string, unknown>>(
      server.deps.db,
      sql`select * from billing_disputes where id = ${id}`,
    )
  )[0];

/**
 * A $10 (10,000-token) dispute reinstated on a user's default client: trial and purchase whole again
 * (60,000), given back by one `refund` row, the dispute reinstated. Returns that row.
 */
async function expectReinstated(u: TestUser, disputeId: string) {
  expect(await balance(u)).toMatchObject({ balance_credits: 60_000, allocation_credits: 60_000 });
  const [latest] = await transactions(u);
  expect(latest).toMatchObject({
    transaction_type: 'refund',
    amount_credits: 10_000,
    balance_after_credits: 60_000,
  });
  expect(await disputeRow(disputeId)).toMatchObject({ state: 'reinstated' });
  return latest;
}

/** A Stripe Dispute object on payment `pi` (the fields svc reads: id, amount, charge, payment_intent, status). */
const dispute = (pi: string, amount: number, status = 'needs_response') => ({
  id: rid('du'),
  object: 'dispute',
  amount,
  currency: 'usd',
  charge: rid('ch'),
  payment_intent: pi,
  status,
  reason: 'fraudulent',
  is_charge_refundable: false,
  balance_transactions: [] as object[],
  created: Math.floor(Date.now() / 1000),
});

describe('disputes', () => {
  it("a withdrawal takes back exactly the disputed payment's tokens; the close as lost changes nothing more", async () => {
    const u = await createUser(server);
    const { pi, grant } = await topup(u, 1_000);
    await grant();
    expect(await balance(u)).toMatchObject({ balance_credits: 60_000, allocation_credits: 60_000 });
    const d = dispute(pi, 1_000);
    const created = rid('evt');
    await send('charge.dispute.created', d, { id: created });
    expect(await outcome(created)).toBe('dispute_recorded');
    expect((await balance(u)).balance_credits).toBe(60_000); // the funds have not left yet
    const withdrawn = rid('evt');
    expect((await send('charge.dispute.funds_withdrawn', d, { id: withdrawn })).status).toBe(200);
    expect(await outcome(withdrawn)).toBe('dispute_withdrawn');
    expect(await balance(u)).toMatchObject({ balance_credits: 50_000, allocation_credits: 50_000 });
    const [latest] = await transactions(u);
    expect(latest).toMatchObject({
      transaction_type: 'refund',
      amount_credits: -10_000,
      balance_after_credits: 50_000,
      org_id: u.clientId,
    });
    expect(latest?.description).toMatch(/^Dispute: \$10\.00 withdrawn/);
    const closed = rid('evt');
    await send('charge.dispute.closed', { ...d, status: 'lost' }, { id: closed });
    expect(await outcome(closed)).toBe('dispute_already_withdrawn');
    expect((await balance(u)).balance_credits).toBe(50_000);
    expect(await disputeRow(d.id)).toMatchObject({
      state: 'withdrawn',
      processor_status: 'lost',
      credits: 10_000,
      from_client: 10_000,
      from_pool: 0,
      shortfall: 0,
    });
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('a close as lost that arrives first takes back; the late funds_withdrawn finds it taken', async () => {
    const u = await createUser(server);
    const { pi, grant } = await topup(u, 1_000);
    await grant();
    const d = dispute(pi, 1_000);
    const closed = rid('evt');
    await send('charge.dispute.closed', { ...d, status: 'lost' }, { id: closed });
    expect(await outcome(closed)).toBe('dispute_withdrawn');
    const late = rid('evt');
    await send('charge.dispute.funds_withdrawn', d, {
      id: late,
      created: Math.floor(Date.now() / 1000) - 3600,
    });
    expect(await outcome(late)).toBe('dispute_already_withdrawn');
    expect((await balance(u)).balance_credits).toBe(50_000);
    // The older event does not overwrite the newer status.
    expect((await disputeRow(d.id))!.processor_status).toBe('lost');
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('takes a dispute once: a repeated event id, and five concurrent deliveries under their own ids', async () => {
    const u = await createUser(server);
    const { pi, grant } = await topup(u, 2_000);
    await grant();
    const d = dispute(pi, 500);
    const eventId = rid('evt');
    expect((await send('charge.dispute.funds_withdrawn', d, { id: eventId })).body).toEqual({
      received: true,
      duplicate: false,
    });
    expect((await send('charge.dispute.funds_withdrawn', d, { id: eventId })).body).toEqual({
      received: true,
      duplicate: true,
    });
    expect((await balance(u)).balance_credits).toBe(70_000 - 5_000);
    const d2 = dispute(pi, 500);
    const ids = Array.from({ length: 5 }, () => rid('evt'));
    const results = await Promise.all(
      ids.map((id, i) =>
        i % 2
          ? send('charge.dispute.closed', { ...d2, status: 'lost' }, { id })
          : send('charge.dispute.funds_withdrawn', d2, { id }),
      ),
    );
    expect(results.map((x) => x.status)).toEqual([200, 200, 200, 200, 200]);
    const outcomes = await Promise.all(ids.map(outcome));
    expect(outcomes.filter((o) => o === 'dispute_withdrawn')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'dispute_already_withdrawn')).toHaveLength(4);
    expect((await balance(u)).balance_credits).toBe(70_000 - 10_000);
    expect(
      (await transactions(u)).filter((t) => t.transaction_type === 'refund').map((t) => t.amount_credits),
    ).toEqual([-5_000, -5_000]);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it("a dispute delivered before its payment's grant waits, and the grant applies it (also when both race)", async () => {
    const u = await createUser(server);
    const first = await topup(u, 1_000);
    const early = rid('evt');
    await send('charge.dispute.funds_withdrawn', dispute(first.pi, 400), { id: early });
    expect(await outcome(early)).toBe('dispute_awaiting_payment');
    expect((await balance(u)).balance_credits).toBe(50_000);
    expect((await reconcile(server.deps.db, server.deps.log, null)).disputes.awaiting).toContainEqual(
      containing({ payment_intent: first.pi, amount_cents: 400 }),
    );
    await first.grant();
    expect((await balance(u)).balance_credits).toBe(60_000 - 4_000);
    const second = await topup(u, 1_000);
    await Promise.all([send('charge.dispute.funds_withdrawn', dispute(second.pi, 1_000)), second.grant()]);
    expect((await balance(u)).balance_credits).toBe(56_000);
    // A win that arrives before the grant cancels the waiting withdrawal: the grant then takes nothing.
    const third = await topup(u, 1_000);
    const d3 = dispute(third.pi, 1_000);
    await send('charge.dispute.funds_withdrawn', d3);
    await send('charge.dispute.closed', { ...d3, status: 'won' });
    await third.grant();
    expect((await balance(u)).balance_credits).toBe(66_000);
    expect(await disputeRow(d3.id)).toMatchObject({ state: 'kept', credits: 0 });
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('funds reinstated give back exactly what was taken, once (positive row, allocation restored)', async () => {
    const u = await createUser(server);
    const { pi, grant } = await topup(u, 1_000);
    await grant();
    const d = dispute(pi, 1_000);
    await send('charge.dispute.funds_withdrawn', d);
    expect(await balance(u)).toMatchObject({ balance_credits: 50_000, allocation_credits: 50_000 });
    const reinstated = rid('evt');
    await send('charge.dispute.funds_reinstated', { ...d, status: 'won' }, { id: reinstated });
    expect(await outcome(reinstated)).toBe('dispute_reinstated');
    const latest = await expectReinstated(u, d.id);
    // Nothing was granted anew: lifetime_granted_credits is the trial and the purchase, as before.
    expect(
      (await api.get<OwnerBalance>('/v1/owner/balance', { token: u.session })).body.lifetime_granted_credits,
    ).toBe(60_000);
    expect(latest?.description).toMatch(/^Dispute won: \$10\.00 reinstated, 10,000 tokens given back/);
    // The close as won, a repeat under a new id and a stray late withdrawal: nothing moves again.
    for (const [type, status] of [
      ['charge.dispute.closed', 'won'],
      ['charge.dispute.funds_reinstated', 'won'],
      ['charge.dispute.funds_withdrawn', 'under_review'],
    ]) {
      const id = rid('evt');
      await send(type!, { ...d, status }, { id });
      expect(await outcome(id), type).toBe('dispute_already_closed');
    }
    expect((await balance(u)).balance_credits).toBe(60_000);
    expect(await disputeRow(d.id)).toMatchObject({ state: 'reinstated' });
    // The payment is whole again: a later full refund takes back the whole grant.
    await send('refund.created', {
      id: rid('re'),
      object: 'refund',
      amount: 1_000,
      currency: 'usd',
      status: 'succeeded',
      payment_intent: pi,
    });
    expect((await balance(u)).balance_credits).toBe(50_000);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it("a close as prevented gives back what was taken; to the owner's default client when the disputed one was deleted", async () => {
    const u = await createUser(server);
    const second = (await api.post<CreatedClient>('/v1/clients', { name: 'Second' }, { token: u.session }))
      .body;
    const res = await api.post<Checkout>(
      `/v1/clients/${second.id}/credits/topup`,
      { amount_usd: 1_000, ...urls },
      { token: u.session },
    );
    const pi = rid('pi');
    await send('checkout.session.completed', {
      ...fake.sessions.get(res.body.session_id)!,
      status: 'complete',
      payment_status: 'paid',
      payment_intent: pi,
    });
    const secondBalance = async () =>
      (await api.get<ClientBalance>(`/v1/clients/${second.id}/credits/balance`, { token: u.session })).body;
    expect((await secondBalance()).balance_credits).toBe(10_000);
    const d = dispute(pi, 1_000);
    await send('charge.dispute.funds_withdrawn', d);
    expect((await secondBalance()).balance_credits).toBe(0);
    expect((await api.delete(`/v1/clients/${second.id}`, { token: u.session })).status).toBe(200);
    const closed = rid('evt');
    await send('charge.dispute.closed', { ...d, status: 'prevented' }, { id: closed });
    expect(await outcome(closed)).toBe('dispute_reinstated');
    // The deleted client cannot take it: the owner's default client does, as a purchase would.
    await expectReinstated(u, d.id);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('a dispute won (or an inquiry closed) without a withdrawal changes nothing, whatever comes late', async () => {
    const u = await createUser(server);
    const { pi, grant } = await topup(u, 1_000);
    await grant();
    const inquiry = dispute(pi, 1_000, 'warning_needs_response');
    await send('charge.dispute.created', inquiry);
    const closedInquiry = rid('evt');
    await send('charge.dispute.closed', { ...inquiry, status: 'warning_closed' }, { id: closedInquiry });
    expect(await outcome(closedInquiry)).toBe('dispute_kept');
    const won = dispute(pi, 1_000, 'under_review');
    await send('charge.dispute.created', won);
    await send('charge.dispute.closed', { ...won, status: 'won' });
    // Out of order: the withdrawal and the reinstatement of the won dispute arrive after its close.
    const lateWithdrawal = rid('evt');
    await send('charge.dispute.funds_withdrawn', won, { id: lateWithdrawal });
    expect(await outcome(lateWithdrawal)).toBe('dispute_already_closed');
    await send('charge.dispute.funds_reinstated', { ...won, status: 'won' });
    expect(await balance(u)).toMatchObject({ balance_credits: 60_000, allocation_credits: 60_000 });
    expect((await transactions(u)).filter((t) => t.transaction_type === 'refund')).toHaveLength(0);
    expect(await disputeRow(inquiry.id)).toMatchObject({ state: 'kept', credits: 0 });
    expect(await disputeRow(won.id)).toMatchObject({ state: 'kept', credits: 0 });
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('a partial dispute takes back its share; with refunds the shares add up to the grant, never more', async () => {
    const u = await createUser(server);
    const { pi, grant } = await topup(u, 2_000);
    await grant();
    await send('charge.dispute.funds_withdrawn', dispute(pi, 500));
    expect((await balance(u)).balance_credits).toBe(70_000 - 5_000);
    await send('refund.created', {
      id: rid('re'),
      object: 'refund',
      amount: 1_500,
      currency: 'usd',
      status: 'succeeded',
      payment_intent: pi,
    });
    expect((await balance(u)).balance_credits).toBe(50_000);
    // Disputed for the whole charge after a partial refund: only what had not been refunded is taken.
    const v = await createUser(server);
    const second = await topup(v, 1_000);
    await second.grant();
    await send('refund.created', {
      id: rid('re'),
      object: 'refund',
      amount: 400,
      currency: 'usd',
      status: 'succeeded',
      payment_intent: second.pi,
    });
    const whole = dispute(second.pi, 1_000);
    await send('charge.dispute.funds_withdrawn', whole);
    expect(await disputeRow(whole.id)).toMatchObject({
      state: 'withdrawn',
      credits: 6_000,
      reversed_cents: 600,
    });
    expect((await balance(v)).balance_credits).toBe(50_000);
    // Stripe then returns the refunded part of the lost dispute (funds_reinstated, status lost): no tokens.
    const overlap = rid('evt');
    await send('charge.dispute.funds_reinstated', { ...whole, status: 'lost' }, { id: overlap });
    expect(await outcome(overlap)).toBe('dispute_recorded');
    expect((await balance(v)).balance_credits).toBe(50_000);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('tokens already spent: the client minus holds, then the pool, shortfall recorded; a win gives back only what was taken', async () => {
    const u = await createUser(server);
    const { pi, grant } = await topup(u, 1_000);
    await grant();
    const spend = rid('req');
    await reserveCredits(server.deps.db, {
      orgKey: u.orgKey,
      userId: u.userId,
      requestId: spend,
      minCredits: 55_000,
      maxCredits: 55_000,
    });
    await settleCredits(server.deps.db, {
      requestId: spend,
      actualCredits: 55_000,
      description: 'test usage',
    });
    // 5,000 left: 4,000 stay with the client, 1,000 go back to the pool; 500 of the client's are held.
    expect(
      (
        await api.put<OwnerBalance>(
          `/v1/owner/orgs/${u.clientId}/allocation`,
          { target_credits: 4_000 },
          { token: u.session },
        )
      ).status,
    ).toBe(200);
    const hold = rid('req');
    await reserveCredits(server.deps.db, {
      orgKey: u.orgKey,
      userId: u.userId,
      requestId: hold,
      minCredits: 500,
      maxCredits: 500,
    });
    const d = dispute(pi, 1_000);
    const ev = rid('evt');
    await send('charge.dispute.funds_withdrawn', d, { id: ev });
    expect(await outcome(ev)).toBe('dispute_withdrawn_with_shortfall');
    expect(await disputeRow(d.id)).toMatchObject({
      state: 'withdrawn',
      credits: 10_000,
      from_client: 3_500,
      from_pool: 1_000,
      shortfall: 5_500,
    });
    expect((await balance(u)).balance_credits).toBe(500); // exactly the hold: never below zero
    expect(await pool(u)).toBe(0);
    // The shortfall is the owner's debt (CONTRACT §8), until the win below cancels it.
    expect((await api.get<OwnerBalance>('/v1/owner/balance', { token: u.session })).body.debt_credits).toBe(
      5_500,
    );
    const report = await reconcile(server.deps.db, server.deps.log, null);
    expect(report.violations).toEqual([]);
    expect(report.disputes.shortfalls).toContainEqual(
      containing({ id: d.id, shortfall: 5_500, org_key: u.orgKey }),
    );
    await voidHold(server.deps.db, hold);
    await send('charge.dispute.closed', { ...d, status: 'won' });
    expect((await balance(u)).balance_credits).toBe(4_000);
    expect(await pool(u)).toBe(1_000);
    expect(
      (await api.get<OwnerBalance>('/v1/owner/balance', { token: u.session })).body.lifetime_granted_credits,
    ).toBe(60_000);
    expect(await disputeRow(d.id)).toMatchObject({ state: 'reinstated' });
    expect((await api.get<OwnerBalance>('/v1/owner/balance', { token: u.session })).body.debt_credits).toBe(
      0,
    );
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('goes through the signature check; a dispute without a payment intent is recorded as unusable', async () => {
    const u = await createUser(server);
    const { pi, grant } = await topup(u, 1_000);
    await grant();
    const payload = stripeEvent('charge.dispute.funds_withdrawn', dispute(pi, 1_000));
    expect(
      (await deliverWebhook(server.url, payload, signatureFor(payload, 'whsec_someone_else'))).status,
    ).toBe(400);
    expect((await balance(u)).balance_credits).toBe(60_000);
    const ev = rid('evt');
    await send('charge.dispute.funds_withdrawn', { ...dispute(pi, 1_000), payment_intent: null }, { id: ev });
    expect(await outcome(ev)).toBe('dispute_unusable');
    expect((await balance(u)).balance_credits).toBe(60_000);
  });

  it('reconciliation applies a dispute whose webhooks were lost, once, then its win', async () => {
    const u = await createUser(server);
    const { pi, grant } = await topup(u, 1_000);
    await grant();
    const d = {
      ...dispute(pi, 1_000),
      balance_transactions: [
        { id: rid('txn'), object: 'balance_transaction', amount: -1_000, reporting_category: 'dispute' },
      ],
    };
    fake.disputes.set(d.id, d);
    try {
      const first = await reconcile(server.deps.db, server.deps.log, server.deps.billing.stripe, {
        proPriceId: server.deps.billing.proPriceId,
      });
      expect(first.refunded).toContain(`dispute ${d.id}`);
      expect((await balance(u)).balance_credits).toBe(50_000);
      expect(
        (
          await reconcile(server.deps.db, server.deps.log, server.deps.billing.stripe, {
            proPriceId: server.deps.billing.proPriceId,
          })
        ).refunded,
      ).not.toContain(`dispute ${d.id}`);
      await send('charge.dispute.funds_withdrawn', d); // the real webhook, late
      expect((await balance(u)).balance_credits).toBe(50_000);
      fake.disputes.set(d.id, { ...d, status: 'won' });
      const won = await reconcile(server.deps.db, server.deps.log, server.deps.billing.stripe, {
        proPriceId: server.deps.billing.proPriceId,
      });
      expect(won.refunded).toContain(`dispute ${d.id}`);
      expect(won.violations).toEqual([]);
      expect((await balance(u)).balance_credits).toBe(60_000);
    } finally {
      fake.disputes.delete(d.id);
    }
  });

  it('a tampered dispute row is a violation', async () => {
    const u = await createUser(server);
    const { pi, grant } = await topup(u, 1_000);
    await grant();
    const d = dispute(pi, 100);
    await send('charge.dispute.funds_withdrawn', d);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
    await server.deps.db.execute(
      sql`update billing_disputes set from_client = from_client + 1, credits = credits + 1 where id = ${d.id}`,
    );
    const names = (await checkInvariants(server.deps.db)).map((v) => v.check);
    expect(names).toContain('dispute ledger rows differ from their dispute');
    expect(names).toContain('payment refunded beyond its grant or differing from its refunds');
    await server.deps.db.execute(
      sql`update billing_disputes set from_client = from_client - 1, credits = credits - 1 where id = ${d.id}`,
    );
    await server.deps.db.execute(sql`update billing_disputes set state = 'kept' where id = ${d.id}`);
    expect((await checkInvariants(server.deps.db)).map((v) => v.check)).toContain(
      'dispute ledger rows differ from their dispute',
    );
    await server.deps.db.execute(sql`update billing_disputes set state = 'withdrawn' where id = ${d.id}`);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });
});

describe('dev processor: the Dispute action on /dev/invoices/{id}', () => {
  const dev = useTestServer();

  it('a lost dispute takes back its share, a won one takes and gives back; CSRF and amount are checked', async () => {
    const u = await createUser(dev.server);
    await payDevTopup(dev, u, 1_000);
    expect(await clientBalance(dev, u)).toBe(60_000);
    const invoice = (await dev.api.get<Invoice[]>(`/v1/clients/${u.clientId}/invoices`, { token: u.session }))
      .body[0]!; // the top-up's invoice
    const page = await openDevPage(invoice.invoice_pdf, '/dispute');
    expect(page.text).toContain('>Dispute</button>');
    expect(page.action!.pathname).toBe(`/dev/invoices/${invoice.id}/dispute`);
    const post = (fields: Record<string, string>) => postDevForm(page, fields);
    expect((await post({ amount_cents: '400', outcome: 'lost' })).status).toBe(403);
    expect((await post({ csrf_token: page.csrf!, amount_cents: '400', outcome: 'lost' })).status).toBe(303);
    expect(await clientBalance(dev, u)).toBe(56_000);
    expect((await post({ csrf_token: page.csrf!, amount_cents: '601', outcome: 'won' })).status).toBe(400);
    expect((await post({ csrf_token: page.csrf!, amount_cents: '600', outcome: 'won' })).status).toBe(303);
    expect(await clientBalance(dev, u)).toBe(56_000);
    const tx = (
      await dev.api.get<LedgerEntry[]>(`/v1/clients/${u.clientId}/credits/transactions`, { token: u.session })
    ).body;
    expect(tx.filter((t) => t.transaction_type === 'refund').map((t) => t.amount_credits)).toEqual([
      6_000, -6_000, -4_000,
    ]);
    expect((await openDevPage(invoice.invoice_pdf, '/dispute')).text).toContain(
      '<dt>Refunded or disputed</dt><dd>$4.00</dd>',
    );
    expect(await checkInvariants(dev.server.deps.db)).toEqual([]);
  });
});
