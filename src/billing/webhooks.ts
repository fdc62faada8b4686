import Stripe from 'stripe';
import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { errorOf } from '../http/errors.js';
import { BILLING_ERRORS } from './errors.js';
import { hasNul } from '../http/input-guard.js';
import type { Logger } from '../log.js';
import { invoicePaymentPaid, receiveRefund } from './refunds.js';
import { creditsPaidFor, grantPaidTopup, paymentEvent } from './paid-grant.js';
import type { OrgRef } from './grant-target.js';
import { invoiceFailed, invoicePaid, syncSubscription, type GrantRules } from './subscription-events.js';
import { autoTopupFailed, autoTopupPaid } from './auto-topup.js';
import type { AfterCommit, MailDeps } from './after-commit.js';
import { receiveDispute } from './disputes.js';
import { idOf, objectsAt, textAt, type StripeObject } from './stripe-object.js';
import { emitEvent } from '../events/outbox.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { verifyEvent } from './webhook-signature.js';
import { usdOfCents } from './par.js';
import { receiptStep } from './topup-receipt.js';
import { transaction } from '../db/transaction.js';

// POST /v1/webhooks/stripe (CONTRACT §8). The signature is checked over the exact request bytes; each
// event applies exactly once: its id is inserted in the same transaction as its effect, and every
// grant is keyed by its business object (`grant:session:<id>`, `grant:invoice:<id>`), so a repeat, a
// concurrent duplicate, a replay under a new event id or an out-of-order delivery changes nothing
// twice. A failure inside rolls the whole event back and answers 5xx, so Stripe retries.
// Refunds (refunds.ts) take back a payment's tokens once per refund id, whichever comes first; disputes
// (disputes.ts) once per dispute id when the funds are withdrawn, and give them back once if won.

/**
 * A paid top-up grants what was paid, at par (CONTRACT §8 "Grants come only from what was paid"): only
 * for a checkout session svc created (our row names its client), and only `amount_total` in cents ×
 * CREDITS_PER_CENT — never an amount from metadata, which anyone with access to the processor account
 * (another integration, a payment link) can write. A coupon that lowers the total lowers the grant.
 */
async function grantTopup(
  tx: Db,
  session: StripeObject,
  log: Logger,
  after: AfterCommit[],
  origin: AuditOrigin,
): Promise<string> {
  const sessionId = String(session.id);
  const [known] = await queryRows<{ org_key: string; owner_id: string; kind: string }>(
    tx,
    sql`select s.org_key, o.owner_id, s.kind from billing_checkout_sessions s join orgs o on o.id = s.org_key
        where s.id = ${sessionId} and s.created_by <> 'webhook'`,
  );
  if (!known || known.kind !== 'topup') {
    log.warn({ sessionId }, 'paid checkout session that svc did not create: nothing granted');
    return 'unknown_session';
  }
  const org: OrgRef = { orgKey: known.org_key, ownerId: known.owner_id };
  const paidCents = Number(session.amount_total ?? 0);
  const credits = creditsPaidFor(paidCents, textAt(session, 'currency') ?? 'usd');
  // A session paid nothing (a 100%-off coupon) is closed as `paid_nothing`: "complete" means granted.
  await tx.execute(
    sql`update billing_checkout_sessions set status = ${credits > 0 ? 'complete' : 'paid_nothing'} where id = ${sessionId}`,
  );
  if (!(credits > 0)) return 'no_amount';
  const granted = await grantPaidTopup(tx, {
    org,
    grantKey: `grant:session:${sessionId}`,
    paymentIntent: idOf(session.payment_intent),
    paidCents,
    credits,
    description: `Top-up: ${usdOfCents(paidCents)}`,
    origin,
  });
  if (!granted) return 'already_granted';
  const receipt = await receiptStep(tx, { orgKey: org.orgKey, paidCents, credits, auto: false });
  if (receipt) after.push(receipt);
  return 'granted';
}

/** The payment intent that paid an invoice (pinned API: invoice.payments; older: invoice.payment_intent). */
async function sessionClosed(
  tx: Db,
  session: StripeObject,
  status: string,
  origin: AuditOrigin,
): Promise<string> {
  const closed = await queryRows<{ org_key: string; kind: string }>(
    tx,
    sql`update billing_checkout_sessions set status = ${status} where id = ${session.id} and status in ('open', 'paying')
        returning org_key, kind`,
  );
  // A top-up whose payment failed (not one left to expire) is told to the endpoints.
  if (status === 'failed' && closed[0]?.kind === 'topup')
    await recordAuditEvent(
      tx,
      paymentEvent(closed[0].org_key, 'payment.failed', origin, {
        kind: 'topup',
        checkout_session: String(session.id),
        amount_cents: Number(session.amount_total ?? 0),
      }),
    );
  if (status === 'failed' && closed[0]?.kind === 'topup')
    await emitEvent(tx, {
      orgKey: closed[0].org_key,
      type: 'topup.failed',
      data: { amount_usd: Number(session.amount_total ?? 0) },
    });
  return status;
}

/**
 * charge.refunded carries the charge, whose `refunds` list is only present when expanded in the
 * pinned API version: each listed refund is applied by its own id (so refund.created for the same
 * refund changes nothing again); without the list the refund.* events do the work.
 */
async function chargeRefunded(tx: Db, charge: StripeObject, origin: AuditOrigin): Promise<string> {
  const refunds = objectsAt(charge, 'refunds', 'data');
  if (refunds.length === 0) return 'refund_via_refund_events';
  const outcomes: string[] = [];
  for (const r of refunds) outcomes.push(await receiveRefund(tx, r, idOf(charge.payment_intent), origin));
  return [...new Set(outcomes)].join(',');
}

async function apply(
  tx: Db,
  log: Logger,
  event: Stripe.Event,
  rules: GrantRules,
  after: AfterCommit[],
  origin: AuditOrigin,
): Promise<string> {
  const object = event.data.object as unknown as StripeObject;
  switch (event.type) {
    case 'checkout.session.completed':
      if (object.mode === 'payment') {
        if (object.payment_status === 'paid') return grantTopup(tx, object, log, after, origin);
        return 'awaiting_async_payment';
      }
      await tx.execute(sql`update billing_checkout_sessions set status = 'complete' where id = ${object.id}`);
      return 'subscription_checkout_completed';
    case 'checkout.session.async_payment_succeeded':
      return grantTopup(tx, object, log, after, origin);
    case 'checkout.session.async_payment_failed':
      return sessionClosed(tx, object, 'failed', origin);
    case 'checkout.session.expired':
      return sessionClosed(tx, object, 'expired', origin);
    case 'invoice.paid':
      return invoicePaid(tx, object, event.created, rules, origin);
    case 'invoice.payment_failed':
      return invoiceFailed(tx, object, event.created, origin);
    case 'customer.subscription.created':
    case 'customer.subscription.updated':
    case 'customer.subscription.deleted':
      return syncSubscription(tx, object, event.created, origin);
    case 'refund.created':
    case 'refund.updated':
    case 'refund.failed':
    case 'charge.refund.updated':
      return receiveRefund(tx, object, null, origin);
    case 'charge.refunded':
      return chargeRefunded(tx, object, origin);
    // Auto top-up's off-session charges (auto-topup.ts); a checkout's intent grants through its session.
    case 'payment_intent.succeeded':
      return autoTopupPaid(tx, object, log, after, origin);
    // An auto top-up's intent that went `processing` and then failed.
    case 'payment_intent.payment_failed': {
      const failed = await autoTopupFailed(tx, object, log, origin);
      if (failed.mail) after.push(failed.mail);
      return failed.outcome;
    }
    case 'invoice_payment.paid':
      return invoicePaymentPaid(tx, object, origin);
    case 'charge.dispute.created':
    case 'charge.dispute.updated':
    case 'charge.dispute.funds_withdrawn':
    case 'charge.dispute.funds_reinstated':
    case 'charge.dispute.closed':
      return receiveDispute(tx, event.type, object, event.created, origin);
    default:
      return 'ignored';
  }
}

/** Applies one verified event exactly once; returns what happened (for logs and tests). */
export async function processEvent(
  db: Db,
  log: Logger,
  event: Stripe.Event,
  rules: GrantRules,
  /** Who the event's audit events name: the webhook's request, or svc itself (a reconcile). */
  origin: AuditOrigin,
  /** Steps to run once the transaction committed (the owner's mails: a receipt, a failed auto top-up). */
  after: AfterCommit[] = [],
): Promise<{ duplicate: boolean; outcome: string }> {
  return transaction(db, async (t) => {
    // A concurrent duplicate blocks on this insert until the first commits, then finds the conflict.
    const claimed = await queryRows<{ id: string }>(
      t,
      sql`insert into billing_webhook_events (id, type, outcome) values (${event.id}, ${event.type}, 'processing')
          on conflict (id) do nothing returning id`,
    );
    if (claimed.length === 0) return { duplicate: true, outcome: 'duplicate' };
    const outcome = await apply(t, log, event, rules, after, origin);
    await t.execute(sql`update billing_webhook_events set outcome = ${outcome} where id = ${event.id}`);
    if (outcome === 'unmapped')
      log.warn({ eventId: event.id, type: event.type }, 'stripe event for an unknown customer');
    return { duplicate: false, outcome };
  });
}

/** The whole webhook: configuration, signature, exactly-once application (the route and the dev processor share it). */
export async function receiveWebhook(
  deps: {
    db: Db;
    log: Logger;
    billing: { verifier: Stripe; webhookSecret: string | undefined; proPriceId: string };
  } & MailDeps,
  rawBody: Buffer | undefined,
  signature: string | undefined,
  origin: AuditOrigin,
): Promise<{ duplicate: boolean; outcome: string }> {
  const secret = deps.billing.webhookSecret;
  if (!secret) throw errorOf(BILLING_ERRORS, 'WEBHOOK_NOT_CONFIGURED');
  const event = verifyEvent(deps.billing.verifier, rawBody, signature, secret);
  // PostgreSQL cannot store U+0000: a signed event carrying one can never be processed, so it is a
  // logged 400 rather than a 500 that the processor would retry for days.
  if (hasNul(event)) {
    deps.log.warn(
      // eslint-disable-next-line no-control-regex -- the NUL is what this takes out of the logged id
      { eventId: event.id.replace(/\u0000/g, ''), type: event.type },
      'webhook event with a NUL character refused',
    );
    throw errorOf(BILLING_ERRORS, 'INVALID_EVENT');
  }
  const after: AfterCommit[] = [];
  const rules = { proPriceId: deps.billing.proPriceId };
  const result = await processEvent(deps.db, deps.log, event, rules, origin, after);
  for (const step of after) await step(deps);
  return result;
}
