import { Router } from 'express';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { queryRows } from '../db/client.js';
import { errorOf, notFound } from '../http/errors.js';
import { BILLING_ERRORS } from './errors.js';
import { parse } from '../http/validate.js';
import { nowUnix } from '../ids.js';
import { csrfField, html, renderPage, sendPage, verifyCsrfField } from '../page-kit/html.js';
import { devId } from './dev-processor.js';
import { usdOfCents } from './par.js';
import { onlyDevIds, type DevEvents } from './dev-events.js';
import { auditOriginOf } from '../audit/context.js';

// The dev processor's invoice pages: an invoice, and its refund or dispute delivered as the events Stripe
// sends (refunds.ts and disputes.ts turn them into tokens taken back).

export function devInvoiceRoutes(deps: Deps, ev: DevEvents): Router {
  const router = Router();
  const { db } = deps;
  onlyDevIds(router, 'invoice_id');

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
    const left = refundable(inv);
    const body = html`<h1>Invoice ${inv.id}</h1>
<dl><dt>Amount due</dt><dd>${usdOfCents(Number(inv.amount_due_cents))}</dd>
<dt>Amount paid</dt><dd>${usdOfCents(Number(inv.amount_paid_cents))}</dd>
<dt>Refunded or disputed</dt><dd>${usdOfCents(Number(inv.refunded_cents ?? 0))}</dd>
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
    if (!inv.payment_intent || left <= 0) throw errorOf(BILLING_ERRORS, 'NOT_REFUNDABLE');
    if (amount_cents > left)
      throw errorOf(BILLING_ERRORS, 'REFUND_TOO_LARGE', `at most ${left} cents can still be refunded`);
    const chargeId = `ch_dev_${inv.payment_intent.replace(/^pi_dev_/, '')}`;
    const origin = auditOriginOf(req);
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
    await ev.deliver(
      'charge.refunded',
      {
        id: chargeId,
        object: 'charge',
        amount: Number(inv.paid_cents),
        amount_refunded: Number(inv.refunded_cents) + amount_cents,
        currency: inv.currency,
        payment_intent: inv.payment_intent,
        refunded: amount_cents === left,
        refunds: { object: 'list', data: [refund], has_more: false },
      },
      origin,
    );
    await ev.deliver('refund.created', refund, origin);
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
    if (!inv.payment_intent || left <= 0) throw errorOf(BILLING_ERRORS, 'NOT_DISPUTABLE');
    if (input.amount_cents > left)
      throw errorOf(BILLING_ERRORS, 'DISPUTE_TOO_LARGE', `at most ${left} cents can be disputed`);
    const origin = auditOriginOf(req);
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
    await ev.deliver('charge.dispute.created', { ...dispute, status: 'needs_response' }, origin);
    await ev.deliver('charge.dispute.funds_withdrawn', { ...dispute, status: 'needs_response' }, origin);
    await ev.deliver('charge.dispute.closed', { ...dispute, status: input.outcome }, origin);
    if (input.outcome === 'won')
      await ev.deliver('charge.dispute.funds_reinstated', { ...dispute, status: 'won' }, origin);
    res.redirect(303, `/dev/invoices/${encodeURIComponent(inv.id)}`);
  });

  return router;
}
