import { Router } from 'express';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { queryRows } from '../db/client.js';
import { notFound } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { csrfField, html, renderPage, sendPage, verifyCsrfField } from '../page-kit/html.js';
import { devId } from './dev-processor.js';
import { usdOfCents } from './par.js';
import { listInvoices } from './payments.js';
import { PERIOD_SECONDS, onlyDevIds, type DevEvents } from './dev-events.js';
import { auditOriginOf } from '../audit/context.js';

// The dev processor's billing portal (what Stripe's customer portal is to the real processor): a
// customer's subscriptions, cards and invoices, and the subscription actions as the events Stripe sends.

export function devPortalRoutes(deps: Deps, ev: DevEvents): Router {
  const router = Router();
  const { db } = deps;
  onlyDevIds(router, 'customer_id');

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
<h2>Invoices</h2>${invoices.length ? html`<ul>${invoices.map((i) => html`<li><a href="${i.invoice_pdf}">${i.id}</a> ${usdOfCents(i.amount_due_cents)}, ${i.status}</li>`)}</ul>` : html`<p>None.</p>`}
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
    const origin = auditOriginOf(req);
    let start = Number(sub.current_period_start);
    let end = Number(sub.current_period_end);
    let cancelAtPeriodEnd =
      action === 'cancel' ? true : action === 'resume' ? false : Boolean(sub.cancel_at_period_end);
    if (action === 'renew') {
      [start, end] = [end, end + PERIOD_SECONDS];
      cancelAtPeriodEnd = false;
      const party = { org_key: sub.org_key, customer_id: customerId };
      await ev.deliver(
        'invoice.paid',
        ev.proInvoicePaid(party, sub.id, 'subscription_cycle', devId('pi'), { start, end }),
        origin,
      );
    }
    await ev.deliver(
      'customer.subscription.updated',
      {
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
      },
      origin,
    );
    res.redirect(303, req.originalUrl);
  });

  return router;
}
