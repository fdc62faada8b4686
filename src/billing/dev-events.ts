import type { Router } from 'express';
import { sql } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { notFound } from '../http/errors.js';
import { nowUnix } from '../ids.js';
import { devId } from './dev-processor.js';
import { receiveWebhook } from './webhooks.js';
import type { AuditOrigin } from '../audit/context.js';

// What the dev processor's pages send (CONTRACT §8): Stripe-shaped events, signed with the webhook secret
// and handed to the very same webhook code (receiveWebhook) as Stripe's would be. The pages are
// dev-checkout.ts, dev-portal.ts and dev-invoices.ts.

export const PERIOD_SECONDS = 30 * 24 * 60 * 60;
export const PRO_PRICE_CENTS = 20_000;

/** Whose invoice: an organization and its processor customer. */
export interface InvoiceParty {
  org_key: string;
  customer_id: string;
}

/**
 * Dev ids are `<prefix>_dev_<base32>` (dev-processor.ts devId): a path parameter that is anything else
 * names nothing, and is answered before it reaches a query. (Express runs a router's params only for that
 * router's own routes, so each dev router calls this.)
 */
export function onlyDevIds(router: Router, name: string) {
  router.param(name, (_req, _res, next, value: string) => {
    next(/^[A-Za-z0-9_]{1,100}$/.test(value) ? undefined : notFound('no such dev object'));
  });
}

export type DevEvents = ReturnType<typeof devEvents>;

export function devEvents(deps: Deps) {
  const { db } = deps;

  /**
   * Signs an event with the webhook secret and hands it to the webhook code, exactly as Stripe would.
   * `origin`: the dev page's request that sends it, or SYSTEM_ORIGIN from a job (an auto top-up's charge).
   */
  async function deliver(type: string, object: Record<string, unknown>, origin: AuditOrigin) {
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
    await receiveWebhook(deps, Buffer.from(payload), header, origin);
  }

  /** A first payment saves a card, as a Checkout session that saves the payment method would. */
  async function ensureCard(customerId: string) {
    await db.execute(sql`
      insert into billing_payment_methods (id, customer_id, brand, last4, exp_month, exp_year, is_default)
      select ${devId('pm')}, ${customerId}, 'visa', '4242', 12, ${new Date().getUTCFullYear() + 3}, true
      where not exists (select 1 from billing_payment_methods where customer_id = ${customerId})`);
  }

  function invoiceObject(s: InvoiceParty, extra: Record<string, unknown>) {
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

  /** A Pro period paid: the invoice.paid of a subscription for [start, end), its line naming the price
   * (webhooks grant only for STRIPE_PRICE_PRO, as Stripe's lines name theirs). */
  const proInvoicePaid = (
    s: InvoiceParty,
    subscription: string,
    billingReason: string,
    paymentIntent: string,
    period: { start: number; end: number },
  ) =>
    invoiceObject(s, {
      status: 'paid',
      billing_reason: billingReason,
      amount_due: PRO_PRICE_CENTS,
      amount_paid: PRO_PRICE_CENTS,
      payments: paidBy(paymentIntent),
      parent: {
        type: 'subscription_details',
        subscription_details: { subscription, metadata: { org_key: s.org_key } },
      },
      lines: {
        object: 'list',
        data: [
          {
            period,
            pricing: {
              type: 'price_details',
              price_details: { price: deps.config.stripe.pricePro, product: 'prod_dev_pro' },
            },
          },
        ],
      },
    });

  return { deliver, ensureCard, invoiceObject, paidBy, proInvoicePaid };
}
