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
import { rid, useStripeServer } from '../helpers/stripe-server.js';
import { createUser } from '../helpers/fixtures.js';
import { proLines, type FakeStripe } from '../helpers/fake-stripe.js';
import { queryRows } from '../../src/db/client.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { reconcile } from '../../src/billing/reconcile.js';
import { reserveCredits, settleCredits, voidHold } from '../../src/billing/spend.js';
import type { ClientBalance, CreatedClient, Invoice, LedgerEntry, OwnerBalance } from '../helpers/answers.js';
import { containing } from '../helpers/json.js';

// Refunds (src/billing/refunds.ts): a refunded payment takes back its tokens in proportion, once per
// refund id, never below zero, whatever the delivery order; signed webhooks against the real server,
// checkout sessions made by the real SDK against the local Stripe fake.

const SECRET = 'whsec_test_secret_for_refunds';
const stripe = useStripeServer(SECRET);
let fake: FakeStripe;
let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(() => {
  ({ fake, server, api } = stripe.world);
});

const { send, balance, pool, transactions, outcome, topup } = stripe;
const refundRow = async (id: string) =>
  (
    await queryRows<Record<string, unknown>>(
      server.deps.db,
      sql`select * from billing_refunds where id = ${id}`,
    )
  )[0];

const refund = (pi: string, amount: number, extra: Record<string, unknown> = {}) => ({
  id: rid('re'),
  object: 'refund',
  amount,
  currency: 'usd',
  status: 'succeeded',
  payment_intent: pi,
  charge: rid('ch'),
  ...extra,
});

describe('refunds', () => {
  it('a full refund of a top-up takes its tokens back with one negative refund transaction', async () => {
    const u = await createUser(server);
    const { pi, completed } = await topup(u, 1_000);
    await send('checkout.session.completed', completed);
    expect(await balance(u)).toMatchObject({ balance_credits: 60_000, allocation_credits: 60_000 });
    const r = refund(pi, 1_000);
    expect((await send('refund.created', r)).status).toBe(200);
    expect(await balance(u)).toMatchObject({ balance_credits: 50_000, allocation_credits: 50_000 });
    const [latest] = await transactions(u);
    expect(latest).toMatchObject({
      transaction_type: 'refund',
      amount_credits: -10_000,
      balance_after_credits: 50_000,
      org_id: u.clientId,
    });
    expect(await refundRow(r.id)).toMatchObject({
      status: 'applied',
      credits: 10_000,
      from_client: 10_000,
      from_pool: 0,
      shortfall: 0,
    });
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('partial refunds of a subscription invoice take back their share; the shares add up to the whole grant', async () => {
    const u = await createUser(server);
    const { completed } = await topup(u, 100); // maps the customer
    const pi = rid('pi');
    const invoice = {
      id: rid('in'),
      object: 'invoice',
      customer: completed.customer,
      status: 'paid',
      billing_reason: 'subscription_create',
      amount_due: 20_000,
      amount_paid: 20_000,
      currency: 'usd',
      created: Math.floor(Date.now() / 1000),
      lines: proLines(),
      payments: {
        object: 'list',
        data: [
          {
            object: 'invoice_payment',
            status: 'paid',
            payment: { type: 'payment_intent', payment_intent: pi },
          },
        ],
      },
      parent: {
        type: 'subscription_details',
        subscription_details: { subscription: rid('sub'), metadata: { org_key: u.orgKey } },
      },
    };
    await send('invoice.paid', invoice);
    expect((await balance(u)).balance_credits).toBe(260_000);
    // 1 cent of 20,000 is 10.5 tokens: rounding is cumulative, so the three refunds sum to exactly 210,000.
    await send('refund.created', refund(pi, 1));
    expect((await balance(u)).balance_credits).toBe(260_000 - 11);
    await send('refund.created', refund(pi, 1));
    expect((await balance(u)).balance_credits).toBe(260_000 - 21);
    await send('refund.created', refund(pi, 9_999));
    expect((await balance(u)).balance_credits).toBe(260_000 - 105_011);
    await send('refund.created', refund(pi, 9_999));
    expect((await balance(u)).balance_credits).toBe(50_000);
    const rows = (await transactions(u))
      .filter((t) => t.transaction_type === 'refund')
      .map((t) => t.amount_credits);
    expect(rows).toEqual([-104_989, -104_990, -10, -11]);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it("finds a Pro period's payment through invoice_payment.paid, before or after invoice.paid", async () => {
    const u = await createUser(server);
    const { completed } = await topup(u, 100); // maps the customer
    // invoice.paid as Stripe sends it by default: no `payments` (only present when expanded).
    const invoice = (id: string) => ({
      id,
      object: 'invoice',
      customer: completed.customer,
      status: 'paid',
      billing_reason: 'subscription_cycle',
      amount_due: 20_000,
      amount_paid: 20_000,
      lines: proLines(),
      currency: 'usd',
      created: Math.floor(Date.now() / 1000),
      parent: {
        type: 'subscription_details',
        subscription_details: { subscription: rid('sub'), metadata: { org_key: u.orgKey } },
      },
    });
    const paid = (invoiceId: string, pi: string) => ({
      id: rid('inpay'),
      object: 'invoice_payment',
      invoice: invoiceId,
      status: 'paid',
      amount_paid: 20_000,
      payment: { type: 'payment_intent', payment_intent: pi },
    });
    const [after, before] = [rid('in'), rid('in')];
    const [piAfter, piBefore] = [rid('pi'), rid('pi')];
    await send('invoice.paid', invoice(after));
    await send('invoice_payment.paid', paid(after, piAfter));
    await send('invoice_payment.paid', paid(before, piBefore));
    await send('invoice.paid', invoice(before));
    expect((await balance(u)).balance_credits).toBe(50_000 + 420_000);
    await send('refund.created', refund(piAfter, 20_000));
    await send('refund.created', refund(piBefore, 10_000));
    expect((await balance(u)).balance_credits).toBe(50_000 + 105_000);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('takes a refund once: repeated event, the same refund under other event types, concurrent duplicates', async () => {
    const u = await createUser(server);
    const { pi, completed } = await topup(u, 2_000);
    await send('checkout.session.completed', completed);
    const r = refund(pi, 500);
    const eventId = rid('evt');
    expect((await send('refund.created', r, { id: eventId })).body).toEqual({
      received: true,
      duplicate: false,
    });
    expect((await send('refund.created', r, { id: eventId })).body).toEqual({
      received: true,
      duplicate: true,
    });
    await send('charge.refund.updated', r);
    await send('charge.refunded', {
      id: r.charge,
      object: 'charge',
      amount: 2_000,
      amount_refunded: 500,
      payment_intent: pi,
      refunds: { object: 'list', data: [r] },
    });
    expect((await balance(u)).balance_credits).toBe(70_000 - 5_000);
    // Five deliveries of one new refund at once, each under its own event id: one takes, four find it taken.
    const r2 = refund(pi, 500);
    const ids = Array.from({ length: 5 }, () => rid('evt'));
    const results = await Promise.all(ids.map((id) => send('refund.updated', r2, { id })));
    expect(results.map((x) => x.status)).toEqual([200, 200, 200, 200, 200]);
    const outcomes = await Promise.all(ids.map(outcome));
    expect(outcomes.filter((o) => o === 'refunded')).toHaveLength(1);
    expect(outcomes.filter((o) => o === 'already_refunded')).toHaveLength(4);
    expect((await balance(u)).balance_credits).toBe(70_000 - 10_000);
    expect((await transactions(u)).filter((t) => t.transaction_type === 'refund')).toHaveLength(2);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it("when the client already spent most, takes what it can (holds excluded), then the pool, then the owner's other clients, and the shortfall becomes debt", async () => {
    const u = await createUser(server);
    const { pi, completed } = await topup(u, 1_000);
    await send('checkout.session.completed', completed);
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
    // 5,000 left: 2,000 stay with the client, 2,000 go to a second client, 1,000 stay in the pool.
    expect(
      (
        await api.put<OwnerBalance>(
          `/v1/owner/orgs/${u.clientId}/allocation`,
          { target_credits: 2_000 },
          { token: u.session },
        )
      ).status,
    ).toBe(200);
    const other = await api.post<CreatedClient>('/v1/clients', { name: 'second' }, { token: u.session });
    expect(
      (
        await api.put<OwnerBalance>(
          `/v1/owner/orgs/${other.body.id}/allocation`,
          { target_credits: 2_000 },
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
    const r = refund(pi, 1_000);
    await send('refund.created', r);
    expect(await refundRow(r.id)).toMatchObject({
      status: 'applied',
      credits: 10_000,
      from_client: 1_500,
      // The pool's 1,000, then the second client's 2,000 (CONTRACT §8 "Debt": take-back order).
      from_pool: 3_000,
      shortfall: 5_500,
    });
    expect((await balance(u)).balance_credits).toBe(500); // exactly the hold
    expect(await pool(u)).toBe(0);
    expect(
      (await api.get<ClientBalance>(`/v1/clients/${other.body.id}/credits/balance`, { token: u.session }))
        .body.balance_credits,
    ).toBe(0);
    expect((await api.get<OwnerBalance>('/v1/owner/balance', { token: u.session })).body.debt_credits).toBe(
      5_500,
    );
    expect((await transactions(u))[0]).toMatchObject({
      transaction_type: 'refund',
      amount_credits: -1_500,
      balance_after_credits: 500,
    });
    // The hold still settles within what it held; nothing ever went below zero.
    await voidHold(server.deps.db, hold);
    const report = await reconcile(server.deps.db, server.deps.log, null);
    expect(report.violations).toEqual([]);
    expect(report.refunds.shortfalls).toContainEqual(
      containing({ id: r.id, shortfall: 5_500, org_key: u.orgKey }),
    );
  });

  it('a refund delivered before its payment waits, and is applied by the grant (also when both race)', async () => {
    const u = await createUser(server);
    const { pi, completed } = await topup(u, 1_000);
    const r = refund(pi, 400);
    const early = rid('evt');
    expect((await send('refund.created', r, { id: early })).status).toBe(200);
    expect(await outcome(early)).toBe('refund_awaiting_payment');
    expect((await balance(u)).balance_credits).toBe(50_000);
    expect((await reconcile(server.deps.db, server.deps.log, null)).refunds.awaiting).toContainEqual(
      containing({ id: r.id }),
    );
    await send('checkout.session.completed', completed);
    expect((await balance(u)).balance_credits).toBe(60_000 - 4_000);
    expect(await refundRow(r.id)).toMatchObject({ status: 'applied', credits: 4_000 });
    // A second purchase whose refund and grant arrive at the same moment: the same end state.
    const second = await topup(u, 1_000);
    await Promise.all([
      send('refund.created', refund(second.pi, 1_000)),
      send('checkout.session.completed', second.completed),
    ]);
    expect((await balance(u)).balance_credits).toBe(56_000);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('reconciliation applies a refund whose webhook was lost, once', async () => {
    const u = await createUser(server);
    const { pi, completed } = await topup(u, 1_000);
    await send('checkout.session.completed', completed);
    const lost = { ...refund(pi, 1_000), created: Math.floor(Date.now() / 1000) };
    fake.refunds.set(lost.id, lost);
    const first = await reconcile(server.deps.db, server.deps.log, server.deps.billing.stripe, {
      proPriceId: server.deps.billing.proPriceId,
    });
    expect(first.refunded).toContain(`refund ${lost.id}`);
    expect(first.violations).toEqual([]);
    expect(
      (
        await reconcile(server.deps.db, server.deps.log, server.deps.billing.stripe, {
          proPriceId: server.deps.billing.proPriceId,
        })
      ).refunded,
    ).not.toContain(`refund ${lost.id}`);
    await send('refund.created', lost); // the real webhook, late
    expect((await balance(u)).balance_credits).toBe(50_000);
    fake.refunds.delete(lost.id);
  });

  it('ignores failed refunds and refunds without a payment; a tampered refund row is a violation', async () => {
    const u = await createUser(server);
    const { pi, completed } = await topup(u, 1_000);
    await send('checkout.session.completed', completed);
    const failed = refund(pi, 1_000, { status: 'failed' });
    const ev = rid('evt');
    await send('refund.failed', failed, { id: ev });
    expect(await outcome(ev)).toBe('refund_failed');
    await send('refund.created', { ...failed, status: 'succeeded' });
    const nopi = rid('evt');
    await send(
      'refund.created',
      { id: rid('re'), object: 'refund', amount: 100, status: 'succeeded' },
      { id: nopi },
    );
    expect(await outcome(nopi)).toBe('refund_unusable');
    expect((await balance(u)).balance_credits).toBe(60_000);
    const good = refund(pi, 100);
    await send('refund.created', good);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
    await server.deps.db.execute(
      sql`update billing_refunds set from_client = from_client + 1, credits = credits + 1 where id = ${good.id}`,
    );
    const names = (await checkInvariants(server.deps.db)).map((v) => v.check);
    expect(names).toContain('refund ledger rows differ from their refund');
    expect(names).toContain('payment refunded beyond its grant or differing from its refunds');
    await server.deps.db.execute(
      sql`update billing_refunds set from_client = from_client - 1, credits = credits - 1 where id = ${good.id}`,
    );
    expect(await checkInvariants(server.deps.db)).toEqual([]);
    // A refund row in the ledger whose refund is not marked applied.
    await server.deps.db.execute(
      sql`update billing_refunds set status = 'awaiting_payment' where id = ${good.id}`,
    );
    expect((await checkInvariants(server.deps.db)).map((v) => v.check)).toContain(
      'refund row without an applied refund',
    );
    await server.deps.db.execute(sql`update billing_refunds set status = 'applied' where id = ${good.id}`);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });
});

describe('dev processor: the Refund button on /dev/invoices/{id}', () => {
  const dev = useTestServer();

  it('refunds part, then the rest, through signed events; too much is refused; the form then disappears', async () => {
    const u = await createUser(dev.server);
    await payDevTopup(dev, u, 2_000);
    expect(await clientBalance(dev, u)).toBe(70_000);
    const invoice = (await dev.api.get<Invoice[]>(`/v1/clients/${u.clientId}/invoices`, { token: u.session }))
      .body[0]!; // the top-up's invoice
    const page = await openDevPage(invoice.invoice_pdf);
    expect(page.text).toContain('>Refund</button>');
    expect(page.action!.pathname).toBe(`/dev/invoices/${invoice.id}/refund`);
    const post = (fields: Record<string, string>) => postDevForm(page, fields);
    // Without the CSRF field: refused, nothing refunded.
    expect((await post({ amount_cents: '500' })).status).toBe(403);
    expect((await post({ csrf_token: page.csrf!, amount_cents: '500' })).status).toBe(303);
    expect(await clientBalance(dev, u)).toBe(65_000);
    expect((await post({ csrf_token: page.csrf!, amount_cents: '1501' })).status).toBe(400);
    expect((await post({ csrf_token: page.csrf!, amount_cents: '1500' })).status).toBe(303);
    expect(await clientBalance(dev, u)).toBe(50_000);
    const tx = (
      await dev.api.get<LedgerEntry[]>(`/v1/clients/${u.clientId}/credits/transactions`, { token: u.session })
    ).body;
    expect(tx.filter((t) => t.transaction_type === 'refund').map((t) => t.amount_credits)).toEqual([
      -15_000, -5_000,
    ]);
    const after = await openDevPage(invoice.invoice_pdf);
    expect(after.text).toContain('<dt>Refunded or disputed</dt><dd>$20.00</dd>');
    expect(after.action).toBeNull();
    expect((await post({ csrf_token: page.csrf!, amount_cents: '1' })).status).toBe(400);
    expect(await checkInvariants(dev.server.deps.db)).toEqual([]);
  });
});
