import { Router, type Request, type Response } from 'express';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { queryRows } from '../db/client.js';
import { badRequest, notFound } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { nowUnix } from '../ids.js';
import { csrfField, html, renderPage, sendPage, verifyCsrfField } from '../portal/html.js';
import { devId } from './dev-processor.js';
import { listInvoices } from './payments.js';
import { receiveWebhook } from './webhooks.js';

// The dev processor's pages (CONTRACT §8): `/dev/checkout/{session_id}` is a plain form that submits
// decision=pay or decision=fail; paying delivers properly signed Stripe-shaped events through the very
// same webhook code (receiveWebhook), then redirects to success_url (or cancel_url). 404 unless the
// dev processor is the one in use.

const PERIOD_SECONDS = 30 * 24 * 60 * 60;
const PRO_PRICE_CENTS = 20_000;

interface SessionRow {
  id: string;
  org_key: string;
  customer_id: string;
  kind: 'topup' | 'subscription';
  credits: unknown;
  amount_cents: unknown;
  status: string;
  success_url: string;
  cancel_url: string;
}

/** Stripe replaces this placeholder in success_url with the session id; so does the dev processor. */
const withSessionId = (url: string, id: string) =>
  url.replaceAll('{CHECKOUT_SESSION_ID}', encodeURIComponent(id));

export function devBillingRoutes(deps: Deps): Router {
  const router = Router();
  const { db } = deps;

  router.use(['/dev/checkout', '/dev/portal', '/dev/invoices'], (_req, _res, next) => {
    if (!deps.config.devMode || deps.billing.processor?.kind !== 'dev') throw notFound('no such route');
    next();
  });

  // Dev ids are `<prefix>_dev_<base32>` (dev-processor.ts devId): anything else names nothing, and is
  // answered before it reaches a query.
  for (const name of ['session_id', 'customer_id', 'invoice_id']) {
    router.param(name, (_req, _res, next, value: string) => {
      next(/^[A-Za-z0-9_]{1,100}$/.test(value) ? undefined : notFound('no such dev object'));
    });
  }

  async function findSession(id: string): Promise<SessionRow | null> {
    const [row] = await queryRows<SessionRow>(
      db,
      sql`select * from billing_checkout_sessions where id = ${id}`,
    );
    return row ?? null;
  }

  /** Signs an event with the webhook secret and hands it to the webhook code, exactly as Stripe would. */
  async function deliver(type: string, object: Record<string, unknown>) {
    const payload = JSON.stringify({
      id: devId('evt'),
      object: 'event',
      api_version: '2026-10-28.endive',
      created: nowUnix(),
      livemode: false,
      pending_webhooks: 1,
      request: { id: null, idempotency_key: null },
      type,
      data: { object },
    });
    const header = deps.billing.verifier.webhooks.generateTestHeaderString({
      payload,
      secret: deps.billing.webhookSecret!,
    });
    await receiveWebhook(deps, Buffer.from(payload), header);
  }

  async function ensureCard(customerId: string) {
    await db.execute(sql`
      insert into billing_payment_methods (id, customer_id, brand, last4, exp_month, exp_year, is_default)
      select ${devId('pm')}, ${customerId}, 'visa', '4242', 12, ${new Date().getUTCFullYear() + 3}, true
      where not exists (select 1 from billing_payment_methods where customer_id = ${customerId})`);
  }

  function invoiceObject(s: SessionRow, extra: Record<string, unknown>) {
    const id = devId('in');
    return {
      id,
      object: 'invoice',
      customer: s.customer_id,
      currency: 'usd',
      created: nowUnix(),
      due_date: null,
      invoice_pdf: `${deps.config.v2Url}/dev/invoices/${id}`,
      metadata: { org_key: s.org_key },
      ...extra,
    };
  }

  /** The invoice's payment as the pinned API shows it (invoice.payments), so refunds can name it. */
  /** A Pro invoice line names its price, as Stripe's does; webhooks grant only for STRIPE_PRICE_PRO. */
  const proPricing = {
    type: 'price_details',
    price_details: { price: deps.config.stripe.pricePro, product: 'prod_dev_pro' },
  };

  const paidBy = (paymentIntent: string) => ({
    object: 'list',
    data: [
      {
        object: 'invoice_payment',
        status: 'paid',
        payment: { type: 'payment_intent', payment_intent: paymentIntent },
      },
    ],
  });

  async function pay(s: SessionRow) {
    await ensureCard(s.customer_id);
    const pi = devId('pi');
    const cents = Number(s.amount_cents);
    const metadata = { org_key: s.org_key, kind: s.kind, credits: String(s.credits) };
    if (s.kind === 'topup') {
      const session = {
        id: s.id,
        object: 'checkout.session',
        mode: 'payment',
        status: 'complete',
        payment_status: 'paid',
        customer: s.customer_id,
        amount_total: cents,
        currency: 'usd',
        client_reference_id: s.org_key,
        payment_intent: pi,
        metadata,
      };
      await deliver('checkout.session.completed', session);
      await deliver(
        'invoice.paid',
        invoiceObject(s, {
          status: 'paid',
          billing_reason: 'manual',
          amount_due: cents,
          amount_paid: cents,
          payments: paidBy(pi),
        }),
      );
      return;
    }
    const start = nowUnix();
    const end = start + PERIOD_SECONDS;
    const subId = devId('sub');
    await deliver('customer.subscription.created', {
      id: subId,
      object: 'subscription',
      customer: s.customer_id,
      status: 'active',
      cancel_at_period_end: false,
      metadata: { org_key: s.org_key },
      items: {
        object: 'list',
        data: [
          {
            id: devId('si'),
            object: 'subscription_item',
            current_period_start: start,
            current_period_end: end,
          },
        ],
      },
    });
    await deliver('checkout.session.completed', {
      id: s.id,
      object: 'checkout.session',
      mode: 'subscription',
      status: 'complete',
      payment_status: 'paid',
      customer: s.customer_id,
      subscription: subId,
      amount_total: PRO_PRICE_CENTS,
      metadata,
    });
    await deliver(
      'invoice.paid',
      invoiceObject(s, {
        status: 'paid',
        billing_reason: 'subscription_create',
        amount_due: PRO_PRICE_CENTS,
        amount_paid: PRO_PRICE_CENTS,
        payments: paidBy(pi),
        parent: {
          type: 'subscription_details',
          subscription_details: { subscription: subId, metadata: { org_key: s.org_key } },
        },
        lines: { object: 'list', data: [{ period: { start, end }, pricing: proPricing }] },
      }),
    );
  }

  async function fail(s: SessionRow) {
    const cents = s.kind === 'topup' ? Number(s.amount_cents) : PRO_PRICE_CENTS;
    await deliver(
      'invoice.payment_failed',
      invoiceObject(s, {
        status: 'open',
        billing_reason: s.kind === 'topup' ? 'manual' : 'subscription_create',
        amount_due: cents,
        amount_paid: 0,
      }),
    );
    await deliver('checkout.session.expired', {
      id: s.id,
      object: 'checkout.session',
      status: 'expired',
      customer: s.customer_id,
      metadata: { org_key: s.org_key },
    });
  }

  function page(req: Request, res: Response, s: SessionRow, status = 200, note?: string) {
    const what =
      s.kind === 'topup'
        ? `${Number(s.credits).toLocaleString('en-US')} tokens`
        : 'Pro plan, 210,000 tokens a month';
    const cents = s.kind === 'topup' ? Number(s.amount_cents) : PRO_PRICE_CENTS;
    const open = s.status === 'open';
    const body = html`<h1>Dev checkout</h1>
<p class="alert info">This is the built-in development processor: no money moves. Paying delivers signed webhook events to this server.</p>
<dl><dt>Item</dt><dd>${what}</dd><dt>Amount</dt><dd>${(cents / 100).toFixed(2)} USD</dd><dt>Session</dt><dd><code>${s.id}</code></dd><dt>Status</dt><dd>${s.status}</dd></dl>
${note ? html`<p class="alert warn">${note}</p>` : ''}
${
  open
    ? html`<form method="post" action="/dev/checkout/${s.id}">${csrfField(req, res)}
<div class="actions"><button type="submit" name="decision" value="pay">Pay ${(cents / 100).toFixed(2)} USD</button>
<button type="submit" name="decision" value="fail" class="danger">Simulate a declined card</button></div></form>`
    : ''
}`;
    const origins = [s.success_url, s.cancel_url].flatMap((u) => {
      try {
        return [new URL(u).origin];
      } catch {
        return [];
      }
    });
    sendPage(res, renderPage({ title: 'Dev checkout', body, narrow: true }), status, { formAction: origins });
  }

  router.get('/dev/checkout/:session_id', async (req, res) => {
    const s = await findSession(String(req.params.session_id));
    if (!s) throw notFound('no such checkout session');
    page(req, res, s);
  });

  router.post('/dev/checkout/:session_id', async (req, res) => {
    verifyCsrfField(req);
    const { decision } = parse(z.object({ decision: z.enum(['pay', 'fail']) }), req.body);
    const id = String(req.params.session_id);
    // Claim the session: of two racing submissions exactly one pays.
    const [claimed] = await queryRows<SessionRow>(
      db,
      sql`update billing_checkout_sessions set status = 'paying' where id = ${id} and status = 'open' returning *`,
    );
    if (!claimed) {
      const s = await findSession(id);
      if (!s) throw notFound('no such checkout session');
      page(req, res, s, 409, 'This checkout is already closed.');
      return;
    }
    if (decision === 'pay') await pay(claimed);
    else await fail(claimed);
    res.redirect(303, withSessionId(decision === 'pay' ? claimed.success_url : claimed.cancel_url, id));
  });

  router.get('/dev/portal/:customer_id', async (req, res) => {
    const [c] = await queryRows<{ org_key: string }>(
      db,
      sql`select org_key from billing_customers where customer_id = ${String(req.params.customer_id)}`,
    );
    if (!c) throw notFound('no such customer');
    const invoices = await listInvoices(db, c.org_key, 100, 0);
    const methods = await deps.billing.processor!.listPaymentMethods(String(req.params.customer_id));
    const subs = await queryRows<{
      id: string;
      status: string;
      current_period_end: unknown;
      cancel_at_period_end: boolean;
    }>(
      db,
      sql`select id, status, current_period_end, cancel_at_period_end from billing_subscriptions where org_key = ${c.org_key} order by updated_at desc`,
    );
    const back =
      typeof req.query.return_url === 'string' && /^https?:\/\//.test(req.query.return_url)
        ? req.query.return_url
        : null;
    const action = `/dev/portal/${encodeURIComponent(String(req.params.customer_id))}${back ? `?return_url=${encodeURIComponent(back)}` : ''}`;
    const actions = (s: { id: string; status: string; cancel_at_period_end: boolean }) =>
      s.status === 'canceled'
        ? ''
        : html`<form method="post" action="${action}">${csrfField(req, res)}<input type="hidden" name="subscription" value="${s.id}">
<div class="actions"><button type="submit" name="action" value="${s.cancel_at_period_end ? 'resume' : 'cancel'}" class="secondary">${s.cancel_at_period_end ? 'Resume' : 'Cancel at period end'}</button>
<button type="submit" name="action" value="renew">Simulate renewal (next period paid)</button></div></form>`;
    const body = html`<h1>Dev billing portal</h1>
<h2>Subscriptions</h2>${subs.length ? html`<ul>${subs.map((s) => html`<li><code>${s.id}</code> ${s.status}${s.cancel_at_period_end ? ' (cancels at period end)' : ''}, period ends ${new Date(Number(s.current_period_end) * 1000).toISOString().slice(0, 10)} ${actions(s)}</li>`)}</ul>` : html`<p>None.</p>`}
<h2>Payment methods</h2>${methods.length ? html`<ul>${methods.map((m) => html`<li>${m.brand} •••• ${m.last4}, expires ${m.exp_month}/${m.exp_year}</li>`)}</ul>` : html`<p>None.</p>`}
<h2>Invoices</h2>${invoices.length ? html`<ul>${invoices.map((i) => html`<li><a href="${i.invoice_pdf}">${i.id}</a> ${(i.amount_due_cents / 100).toFixed(2)} ${i.currency.toUpperCase()}, ${i.status}</li>`)}</ul>` : html`<p>None.</p>`}
${back ? html`<p><a href="${back}">Return</a></p>` : ''}`;
    sendPage(res, renderPage({ title: 'Dev billing portal', body }));
  });

  // Portal actions, delivered as the events Stripe would send: cancel or resume at period end, and a
  // renewal (the next period's invoice.paid, billing_reason subscription_cycle) to try renewals by hand.
  router.post('/dev/portal/:customer_id', async (req, res) => {
    verifyCsrfField(req);
    const { action, subscription } = parse(
      z.object({ action: z.enum(['cancel', 'resume', 'renew']), subscription: z.string().min(1).max(255) }),
      req.body,
    );
    const customerId = String(req.params.customer_id);
    const [sub] = await queryRows<{
      id: string;
      org_key: string;
      status: string;
      current_period_start: unknown;
      current_period_end: unknown;
      cancel_at_period_end: boolean;
    }>(
      db,
      sql`select * from billing_subscriptions where id = ${subscription} and customer_id = ${customerId}`,
    );
    if (!sub) throw notFound('no such subscription');
    let start = Number(sub.current_period_start);
    let end = Number(sub.current_period_end);
    let cancelAtPeriodEnd =
      action === 'cancel' ? true : action === 'resume' ? false : Boolean(sub.cancel_at_period_end);
    if (action === 'renew') {
      [start, end] = [end, end + PERIOD_SECONDS];
      cancelAtPeriodEnd = false;
      const session = { id: '', org_key: sub.org_key, customer_id: customerId } as SessionRow;
      await deliver(
        'invoice.paid',
        invoiceObject(session, {
          status: 'paid',
          billing_reason: 'subscription_cycle',
          amount_due: PRO_PRICE_CENTS,
          amount_paid: PRO_PRICE_CENTS,
          payments: paidBy(devId('pi')),
          parent: {
            type: 'subscription_details',
            subscription_details: { subscription: sub.id, metadata: { org_key: sub.org_key } },
          },
          lines: { object: 'list', data: [{ period: { start, end }, pricing: proPricing }] },
        }),
      );
    }
    await deliver('customer.subscription.updated', {
      id: sub.id,
      object: 'subscription',
      customer: customerId,
      status: sub.status,
      cancel_at_period_end: cancelAtPeriodEnd,
      metadata: { org_key: sub.org_key },
      items: {
        object: 'list',
        data: [{ object: 'subscription_item', current_period_start: start, current_period_end: end }],
      },
    });
    res.redirect(303, req.originalUrl);
  });

  interface InvoicePayment {
    id: string;
    amount_due_cents: unknown;
    amount_paid_cents: unknown;
    currency: string;
    status: string;
    created_at_unix: unknown;
    payment_intent: string | null;
    granted: boolean | null;
    paid_cents: unknown;
    refunded_cents: unknown;
  }

  async function findInvoice(id: string): Promise<InvoicePayment | null> {
    const [row] = await queryRows<InvoicePayment>(
      db,
      sql`select i.id, i.amount_due_cents, i.amount_paid_cents, i.currency, i.status, i.created_at_unix, i.payment_intent,
                 p.grant_key is not null as granted, p.amount_cents as paid_cents, p.refunded_cents
          from billing_invoices i left join billing_payments p on p.payment_intent = i.payment_intent where i.id = ${id}`,
    );
    return row ?? null;
  }

  /** Cents of the payment behind the invoice that can still be refunded (0 when it granted nothing). */
  const refundable = (inv: InvoicePayment) =>
    inv.granted ? Number(inv.paid_cents) - Number(inv.refunded_cents) : 0;

  router.get('/dev/invoices/:invoice_id', async (req, res) => {
    const inv = await findInvoice(String(req.params.invoice_id));
    if (!inv) throw notFound('no such invoice');
    const cur = inv.currency.toUpperCase();
    const left = refundable(inv);
    const body = html`<h1>Invoice ${inv.id}</h1>
<dl><dt>Amount due</dt><dd>${(Number(inv.amount_due_cents) / 100).toFixed(2)} ${cur}</dd>
<dt>Amount paid</dt><dd>${(Number(inv.amount_paid_cents) / 100).toFixed(2)} ${cur}</dd>
<dt>Refunded or disputed</dt><dd>${(Number(inv.refunded_cents ?? 0) / 100).toFixed(2)} ${cur}</dd>
<dt>Status</dt><dd>${inv.status}</dd><dt>Date</dt><dd>${new Date(Number(inv.created_at_unix) * 1000).toISOString().slice(0, 10)}</dd></dl>
${
  left > 0
    ? html`<form method="post" action="/dev/invoices/${inv.id}/refund">${csrfField(req, res)}
<p class="alert info">Refunding delivers signed charge.refunded and refund.created events to this server; the tokens this payment granted are taken back in proportion.</p>
<label>Amount to refund (cents) <input type="number" name="amount_cents" min="1" max="${left}" value="${left}" required></label>
<div class="actions"><button type="submit" class="danger">Refund</button></div></form>
<form method="post" action="/dev/invoices/${inv.id}/dispute">${csrfField(req, res)}
<p class="alert info">A dispute (chargeback) delivers signed charge.dispute.* events: the funds are withdrawn (the tokens are taken back in proportion), then the card issuer decides; a won dispute gives them back.</p>
<label>Disputed amount (cents) <input type="number" name="amount_cents" min="1" max="${left}" value="${left}" required></label>
<label>Outcome <select name="outcome"><option value="lost">lost</option><option value="won">won</option></select></label>
<div class="actions"><button type="submit" class="danger">Dispute</button></div></form>`
    : ''
}`;
    sendPage(res, renderPage({ title: 'Invoice', body, narrow: true }));
  });

  // A refund as Stripe reports one: the charge (with its refunds expanded) and the refund itself, two
  // events for the same refund id, so the page also shows that the pair takes the tokens back once.
  router.post('/dev/invoices/:invoice_id/refund', async (req, res) => {
    verifyCsrfField(req);
    const { amount_cents } = parse(
      z.object({ amount_cents: z.coerce.number().int().min(1).max(100_000_000) }),
      req.body,
    );
    const inv = await findInvoice(String(req.params.invoice_id));
    if (!inv) throw notFound('no such invoice');
    const left = refundable(inv);
    if (!inv.payment_intent || left <= 0)
      throw badRequest('NOT_REFUNDABLE', 'this invoice has no payment left to refund');
    if (amount_cents > left)
      throw badRequest('REFUND_TOO_LARGE', `at most ${left} cents can still be refunded`);
    const chargeId = `ch_dev_${inv.payment_intent.replace(/^pi_dev_/, '')}`;
    const refund = {
      id: devId('re'),
      object: 'refund',
      amount: amount_cents,
      currency: inv.currency,
      status: 'succeeded',
      charge: chargeId,
      payment_intent: inv.payment_intent,
      created: nowUnix(),
    };
    await deliver('charge.refunded', {
      id: chargeId,
      object: 'charge',
      amount: Number(inv.paid_cents),
      amount_refunded: Number(inv.refunded_cents) + amount_cents,
      currency: inv.currency,
      payment_intent: inv.payment_intent,
      refunded: amount_cents === left,
      refunds: { object: 'list', data: [refund], has_more: false },
    });
    await deliver('refund.created', refund);
    res.redirect(303, `/dev/invoices/${encodeURIComponent(inv.id)}`);
  });

  // A chargeback's whole life at once, as Stripe reports it: created, funds withdrawn, then the verdict
  // (closed as lost; or closed as won with the funds reinstated). disputes.ts turns it into tokens.
  router.post('/dev/invoices/:invoice_id/dispute', async (req, res) => {
    verifyCsrfField(req);
    const input = parse(
      z.object({
        amount_cents: z.coerce.number().int().min(1).max(100_000_000),
        outcome: z.enum(['lost', 'won']),
      }),
      req.body,
    );
    const inv = await findInvoice(String(req.params.invoice_id));
    if (!inv) throw notFound('no such invoice');
    const left = refundable(inv);
    if (!inv.payment_intent || left <= 0)
      throw badRequest('NOT_DISPUTABLE', 'this invoice has no payment left to dispute');
    if (input.amount_cents > left)
      throw badRequest('DISPUTE_TOO_LARGE', `at most ${left} cents can be disputed`);
    const dispute = {
      id: devId('du'),
      object: 'dispute',
      amount: input.amount_cents,
      currency: inv.currency,
      charge: `ch_dev_${inv.payment_intent.replace(/^pi_dev_/, '')}`,
      payment_intent: inv.payment_intent,
      reason: 'fraudulent',
      is_charge_refundable: false,
      balance_transactions: [],
      created: nowUnix(),
    };
    await deliver('charge.dispute.created', { ...dispute, status: 'needs_response' });
    await deliver('charge.dispute.funds_withdrawn', { ...dispute, status: 'needs_response' });
    await deliver('charge.dispute.closed', { ...dispute, status: input.outcome });
    if (input.outcome === 'won')
      await deliver('charge.dispute.funds_reinstated', { ...dispute, status: 'won' });
    res.redirect(303, `/dev/invoices/${encodeURIComponent(inv.id)}`);
  });

  return router;
}
