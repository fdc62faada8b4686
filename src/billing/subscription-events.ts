import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { grantToOrg, SOURCE_PURCHASES } from './ledger.js';
import { lockInvoice, paymentIntentOfInvoice, recordPayment } from './refunds.js';
import { lockPayment } from './payment-reversals.js';
import { paymentEvent } from './paid-grant.js';
import { grantTarget, orgFor, type OrgRef } from './grant-target.js';
import { PRO_PERIOD_CREDITS } from './service.js';
import { at, idOf, objectAt, objectsAt, textAt, type StripeObject } from './stripe-object.js';
import { emitEvent } from '../events/outbox.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';

// The subscription's events from the processor (CONTRACT §8), applied by ./webhooks.ts in the event's
// transaction: a paid invoice of the Pro price grants the period's tokens once per invoice, a failed one
// is recorded, and the subscription's state follows its newest event.

const SUBSCRIPTION_GRANT_REASONS = new Set(['subscription_create', 'subscription_cycle']);

/** What a grant is checked against: the configured Pro price (STRIPE_PRICE_PRO). */
export interface GrantRules {
  proPriceId: string;
}

function invoicePaymentIntent(invoice: StripeObject): string | null {
  const payments = objectsAt(invoice, 'payments', 'data');
  const paid = payments.find((p) => p.status === 'paid') ?? payments[0];
  return idOf(at(paid, 'payment', 'payment_intent')) ?? idOf(invoice.payment_intent);
}

function invoiceSubscriptionId(invoice: StripeObject): string | null {
  // API 2025-03-31 and later: parent.subscription_details.subscription (the pinned version's shape).
  return idOf(at(invoice, 'parent', 'subscription_details', 'subscription')) ?? idOf(invoice.subscription);
}

/** The metadata we set on the subscription, as the invoice carries it (pinned version), else the invoice's. */
const invoiceMetadata = (invoice: StripeObject): StripeObject =>
  objectAt(at(invoice, 'parent', 'subscription_details', 'metadata') ?? invoice.metadata);

async function upsertInvoice(
  tx: Db,
  invoice: StripeObject,
  org: OrgRef,
  eventCreated: number,
  failed: boolean,
): Promise<void> {
  await tx.execute(sql`
    insert into billing_invoices (id, org_key, customer_id, subscription_id, billing_reason, amount_due_cents, amount_paid_cents,
                                  status, currency, invoice_pdf, created_at_unix, due_date, payment_failed_at, event_created, payment_intent)
    values (${invoice.id}, ${org.orgKey}, ${idOf(invoice.customer) ?? ''}, ${invoiceSubscriptionId(invoice)},
            ${invoice.billing_reason ?? null}, ${Number(invoice.amount_due ?? 0)}, ${Number(invoice.amount_paid ?? 0)},
            ${textAt(invoice, 'status') ?? (failed ? 'open' : 'paid')}, ${(textAt(invoice, 'currency') ?? 'usd').toLowerCase()},
            ${invoice.invoice_pdf ?? null}, ${Number(invoice.created ?? eventCreated)}, ${invoice.due_date ?? null},
            ${failed ? sql`now()` : sql`null`}, ${eventCreated}, ${invoicePaymentIntent(invoice)})
    on conflict (id) do update set
      payment_intent = coalesce(billing_invoices.payment_intent, excluded.payment_intent),
      status = case when billing_invoices.status = 'paid' then 'paid' else excluded.status end,
      amount_paid_cents = greatest(billing_invoices.amount_paid_cents, excluded.amount_paid_cents),
      invoice_pdf = coalesce(excluded.invoice_pdf, billing_invoices.invoice_pdf),
      payment_failed_at = coalesce(billing_invoices.payment_failed_at, excluded.payment_failed_at),
      event_created = greatest(billing_invoices.event_created, excluded.event_created)`);
}

/** Whether an invoice bills the Pro price (pinned API: lines[].pricing.price_details.price; older: lines[].price). */
function billsPrice(invoice: StripeObject, priceId: string): boolean {
  return objectsAt(invoice, 'lines', 'data').some((line) => {
    const price = idOf(at(line, 'pricing', 'price_details', 'price')) ?? idOf(line.price);
    return price === priceId;
  });
}

/**
 * invoice.paid grants a Pro period only for a subscription invoice of `STRIPE_PRICE_PRO` with money
 * paid (CONTRACT §8): an invoice of another price, or one paid 0 (a 100%-off coupon), is recorded only.
 */
export async function invoicePaid(
  tx: Db,
  invoice: StripeObject,
  eventCreated: number,
  rules: GrantRules,
  origin: AuditOrigin,
): Promise<string> {
  const invoiceId = String(invoice.id);
  const org = await orgFor(tx, idOf(invoice.customer), invoiceMetadata(invoice));
  if (!org) return 'unmapped';
  await lockInvoice(tx, invoiceId);
  await upsertInvoice(tx, invoice, org, eventCreated, false);
  if (!SUBSCRIPTION_GRANT_REASONS.has(textAt(invoice, 'billing_reason') ?? '')) return 'recorded';
  if (!billsPrice(invoice, rules.proPriceId)) return 'not_pro_price';
  const paidCents = Number(invoice.amount_paid ?? 0);
  if (!(paidCents > 0)) return 'nothing_paid';
  const subscriptionId = invoiceSubscriptionId(invoice);
  const period = at(invoice, 'lines', 'data', 0, 'period') as { start?: number; end?: number } | undefined;
  if (subscriptionId) {
    // invoice.paid may arrive before customer.subscription.created: the row is started here as of
    // this event, so an older subscription event delivered late cannot undo it; newer ones refine it.
    await tx.execute(sql`
      insert into billing_subscriptions (id, org_key, customer_id, status, current_period_start, current_period_end, event_created)
      values (${subscriptionId}, ${org.orgKey}, ${idOf(invoice.customer) ?? ''}, 'active', ${period?.start ?? null},
              ${period?.end ?? null}, ${eventCreated})
      on conflict (id) do nothing`);
  }
  const paymentIntent = invoicePaymentIntent(invoice) ?? (await paymentIntentOfInvoice(tx, invoiceId));
  if (paymentIntent) await lockPayment(tx, paymentIntent);
  const target = await grantTarget(tx, org);
  const granted = await grantToOrg(tx, {
    key: `grant:invoice:${invoiceId}`,
    source: SOURCE_PURCHASES,
    ownerId: org.ownerId,
    orgKey: target,
    amount: PRO_PERIOD_CREDITS,
    type: 'subscription_credit',
    description:
      period?.start && period.end
        ? `Pro subscription period ${new Date(period.start * 1000).toISOString().slice(0, 10)} to ${new Date(period.end * 1000).toISOString().slice(0, 10)}`
        : 'Pro subscription period',
  });
  if (paymentIntent) {
    await recordPayment(
      tx,
      {
        paymentIntent,
        grantKey: `grant:invoice:${invoiceId}`,
        orgKey: target,
        ownerId: org.ownerId,
        credits: PRO_PERIOD_CREDITS,
        amountCents: paidCents,
      },
      origin,
    );
  }
  if (granted)
    await recordAuditEvent(
      tx,
      paymentEvent(target, 'payment.succeeded', origin, {
        kind: 'subscription',
        invoice: invoiceId,
        amount_cents: paidCents,
        credits: PRO_PERIOD_CREDITS,
      }),
    );
  return granted ? 'granted' : 'already_granted';
}

export async function invoiceFailed(
  tx: Db,
  invoice: StripeObject,
  eventCreated: number,
  origin: AuditOrigin,
): Promise<string> {
  const org = await orgFor(tx, idOf(invoice.customer), invoiceMetadata(invoice));
  if (!org) return 'unmapped';
  await upsertInvoice(tx, invoice, org, eventCreated, true);
  await recordAuditEvent(
    tx,
    paymentEvent(org.orgKey, 'payment.failed', origin, {
      kind: 'subscription',
      invoice: String(invoice.id),
      amount_cents: Number(invoice.amount_due ?? 0),
    }),
  );
  return 'recorded';
}

export async function syncSubscription(
  tx: Db,
  sub: StripeObject,
  eventCreated: number,
  origin: AuditOrigin,
): Promise<string> {
  const org = await orgFor(tx, idOf(sub.customer), objectAt(sub, 'metadata'));
  if (!org) return 'unmapped';
  // Period dates live on the subscription items in the pinned API version.
  const item = objectAt(sub, 'items', 'data', 0);
  const start = item.current_period_start ?? sub.current_period_start ?? null;
  const end = item.current_period_end ?? sub.current_period_end ?? null;
  // An older event delivered late never overwrites a newer state.
  const [stored] = await queryRows<{
    status: string;
    current_period_end: unknown;
    cancel_at_period_end: boolean;
  }>(
    tx,
    sql`
    insert into billing_subscriptions (id, org_key, customer_id, status, current_period_start, current_period_end,
                                       cancel_at_period_end, event_created, updated_at)
    values (${sub.id}, ${org.orgKey}, ${idOf(sub.customer) ?? ''}, ${textAt(sub, 'status') ?? 'active'}, ${start}, ${end},
            ${Boolean(sub.cancel_at_period_end)}, ${eventCreated}, now())
    on conflict (id) do update set
      status = excluded.status,
      current_period_start = coalesce(excluded.current_period_start, billing_subscriptions.current_period_start),
      current_period_end = coalesce(excluded.current_period_end, billing_subscriptions.current_period_end),
      cancel_at_period_end = excluded.cancel_at_period_end,
      event_created = excluded.event_created,
      updated_at = now()
    where billing_subscriptions.event_created <= excluded.event_created
    returning status, current_period_end, cancel_at_period_end`,
  );
  if (stored)
    await recordAuditEvent(tx, {
      orgKey: org.orgKey,
      action: 'subscription.changed',
      origin,
      target: { type: 'subscription', id: String(sub.id) },
      details: { status: stored.status, cancel_at_period_end: stored.cancel_at_period_end },
    });
  // A state that was stored (not an older event delivered late) is told to the endpoints.
  if (stored)
    await emitEvent(tx, {
      orgKey: org.orgKey,
      type: 'subscription.updated',
      data: {
        status: stored.status,
        current_period_end: stored.current_period_end === null ? null : Number(stored.current_period_end),
        cancel_at_period_end: stored.cancel_at_period_end,
      },
    });
  return 'synced';
}
