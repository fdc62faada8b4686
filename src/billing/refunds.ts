import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { applyWaitingDisputes } from './disputes.js';
import { lockPayment, num, takeBack, tokens, usd } from './payment-reversals.js';
import { at, idOf, textAt, type StripeObject } from './stripe-object.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';

// Refunds (interface document: Transaction type `refund`; CONTRACT §3 signs, §8 exactly once).
//
// A refunded payment takes back the tokens it granted in proportion to the money returned
// (refunded / paid × granted), exactly once per processor refund: the ledger keys are `refund:<re id>`
// (the client's row, shown with a negative amount_credits) and `refund:<re id>:pool` (the part the
// owner's unallocated pool gives when the client has already spent or holds it). A balance never goes
// below zero (holds included): what neither can give is recorded as the refund's `shortfall`, and
// `npm run billing:reconcile` lists it. The take-back itself is payment-reversals.ts, shared with
// disputes (disputes.ts).
//
// Lock order, the same on every path: the payment row (billing_payments), then the ledger accounts
// (ascending id, ledger.ts). A refund that arrives before its payment's grant is stored as
// `awaiting_payment` and applied by the grant's own transaction; both sides first claim the payment's
// row, so whichever commits second sees the other. Disputes wait and are applied the same way.

/**
 * Serialises invoice.paid and invoice_payment.paid for one invoice (a transaction-scoped advisory lock,
 * taken before any row lock), so whichever commits second links the payment to the invoice's grant.
 */
export async function lockInvoice(tx: Db, invoiceId: string): Promise<void> {
  await tx.execute(sql`select pg_advisory_xact_lock(hashtext(${`invoice:${invoiceId}`}))`);
}

/** The payment intent an earlier invoice_payment.paid named for this invoice. */
export async function paymentIntentOfInvoice(tx: Db, invoiceId: string): Promise<string | null> {
  const [row] = await queryRows<{ payment_intent: string }>(
    tx,
    sql`select payment_intent from billing_payments where invoice_id = ${invoiceId} order by created_at limit 1`,
  );
  return row?.payment_intent ?? null;
}

/**
 * invoice_payment.paid: which payment paid an invoice. In the pinned API version invoice.paid carries
 * `payments` only when expanded, so this event is how a subscription period's refund finds its grant.
 */
export async function invoicePaymentPaid(tx: Db, ip: StripeObject, origin: AuditOrigin): Promise<string> {
  const invoiceId = idOf(ip.invoice);
  const pi = idOf(at(ip, 'payment', 'payment_intent'));
  if (!invoiceId || !pi) return 'ignored';
  if (ip.status && ip.status !== 'paid') return 'ignored';
  await lockInvoice(tx, invoiceId);
  await lockPayment(tx, pi);
  await tx.execute(
    sql`update billing_payments set invoice_id = ${invoiceId} where payment_intent = ${pi} and invoice_id is null`,
  );
  await tx.execute(
    sql`update billing_invoices set payment_intent = ${pi} where id = ${invoiceId} and payment_intent is null`,
  );
  // The invoice's grant already made (invoice.paid came first): link it now, from the ledger's own rows.
  const [grant] = await queryRows<{
    owner_id: string;
    org_key: string;
    credits: unknown;
    amount_paid_cents: unknown;
  }>(
    tx,
    sql`select p.user_id as owner_id, o.org_key, g.amount as credits, i.amount_paid_cents
        from billing_entries g
        join billing_entries a on a.key = g.key || ':allocate'
        join billing_accounts p on p.id = g.to_account
        join billing_accounts o on o.id = a.to_account
        join billing_invoices i on i.id = ${invoiceId}
        where g.key = ${`grant:invoice:${invoiceId}`}`,
  );
  if (!grant) return 'payment_linked';
  await recordPayment(
    tx,
    {
      paymentIntent: pi,
      grantKey: `grant:invoice:${invoiceId}`,
      orgKey: grant.org_key,
      ownerId: grant.owner_id,
      credits: num(grant.credits),
      amountCents: num(grant.amount_paid_cents),
    },
    origin,
  );
  return 'payment_linked_to_grant';
}

export interface GrantedPayment {
  paymentIntent: string;
  grantKey: string;
  orgKey: string;
  ownerId: string;
  credits: number;
  amountCents: number;
}

/**
 * Records which grant a payment made (after lockPayment and the grant, same transaction), then applies
 * the refunds and dispute withdrawals that were waiting for it. Returns the ids applied now.
 */
export async function recordPayment(tx: Db, p: GrantedPayment, origin: AuditOrigin): Promise<string[]> {
  await tx.execute(sql`
    update billing_payments set grant_key = ${p.grantKey}, org_key = ${p.orgKey}, owner_id = ${p.ownerId},
                                credits = ${p.credits}, amount_cents = ${p.amountCents}
    where payment_intent = ${p.paymentIntent} and grant_key is null`);
  const waiting = await queryRows<{ id: string; amount_cents: unknown }>(
    tx,
    sql`select id, amount_cents from billing_refunds where payment_intent = ${p.paymentIntent} and status = 'awaiting_payment'
        order by created_at, id for update`,
  );
  const applied: string[] = [];
  for (const r of waiting) {
    await applyRefund(tx, r.id, num(r.amount_cents), p.paymentIntent, origin);
    applied.push(r.id);
  }
  return [...applied, ...(await applyWaitingDisputes(tx, p.paymentIntent))];
}

// Tokens are taken back as soon as a refund exists (succeeded, pending or requires_action: the money is
// on its way back); only a refund that failed or was canceled before being applied takes nothing.
const FAILED_STATUSES = new Set(['failed', 'canceled']);

/** One processor Refund object (refund.* and charge.refund.updated events, or a charge's refunds list). */
export async function receiveRefund(
  tx: Db,
  refund: StripeObject,
  fallbackPaymentIntent: string | null,
  origin: AuditOrigin,
): Promise<string> {
  const id = typeof refund.id === 'string' ? refund.id : null;
  const pi = idOf(refund.payment_intent) ?? fallbackPaymentIntent;
  const amount = Number(refund.amount);
  if (!id || !pi || !Number.isSafeInteger(amount) || amount <= 0) return 'refund_unusable';
  const status = textAt(refund, 'status') ?? 'succeeded';
  const payment = await lockPayment(tx, pi);
  await tx.execute(sql`
    insert into billing_refunds (id, payment_intent, amount_cents, status)
    values (${id}, ${pi}, ${amount}, ${FAILED_STATUSES.has(status) ? 'failed' : 'awaiting_payment'})
    on conflict (id) do nothing`);
  const [row] = await queryRows<{ status: string }>(
    tx,
    sql`select status from billing_refunds where id = ${id} for update`,
  );
  if (row!.status === 'applied')
    return FAILED_STATUSES.has(status) ? 'refund_failed_after_applied' : 'already_refunded';
  if (FAILED_STATUSES.has(status)) {
    await tx.execute(sql`update billing_refunds set status = 'failed' where id = ${id}`);
    return 'refund_failed';
  }
  if (row!.status === 'failed') return 'refund_failed';
  if (!payment.grant_key) return 'refund_awaiting_payment';
  return applyRefund(tx, id, amount, pi, origin);
}

/** Applies one refund (its row and the payment's row already locked by the caller). */
async function applyRefund(
  tx: Db,
  refundId: string,
  amountCents: number,
  paymentIntent: string,
  origin: AuditOrigin,
): Promise<string> {
  const taken = await takeBack(tx, {
    paymentIntent,
    amountCents,
    key: `refund:${refundId}`,
    describe: (t) =>
      `Refund: ${usd(amountCents)} returned, ${tokens(t.credits)} tokens taken back` +
      (t.shortfall > 0 ? ` (${tokens(t.shortfall)} already spent)` : ''),
  });
  await tx.execute(sql`
    update billing_refunds set status = 'applied', credits = ${taken.credits}, from_client = ${taken.fromClient},
                               from_pool = ${taken.fromPool}, shortfall = ${taken.shortfall}, applied_at = now()
    where id = ${refundId}`);
  const [payment] = await queryRows<{ org_key: string | null }>(
    tx,
    sql`select org_key from billing_payments where payment_intent = ${paymentIntent}`,
  );
  if (payment?.org_key)
    await recordAuditEvent(tx, {
      orgKey: payment.org_key,
      action: 'refund.created',
      origin,
      target: { type: 'refund', id: refundId },
      details: {
        payment_intent: paymentIntent,
        amount_cents: amountCents,
        credits_taken_back: taken.credits,
      },
    });
  return taken.shortfall > 0 ? 'refunded_with_shortfall' : 'refunded';
}
