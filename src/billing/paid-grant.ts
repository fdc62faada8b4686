import type { Db } from '../db/client.js';
import { clientIdOf } from '../ids.js';
import { emitEvent } from '../events/outbox.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { grantTarget, type OrgRef } from './grant-target.js';
import { grantToOrg, SOURCE_PURCHASES } from './ledger.js';
import { lockPayment } from './payment-reversals.js';
import { recordPayment } from './refunds.js';
import { CREDITS_PER_CENT } from './service.js';

// A top-up's grant, for both ways one is paid: a checkout session (webhooks.ts) and an off-session auto
// top-up (auto-topup.ts). CONTRACT §8: grants come only from what was paid, at par.

/** The tokens `paidCents` buys: USD cents at par, or 0 when nothing was paid or not in USD. */
export function creditsPaidFor(paidCents: number, currency: string): number {
  return Number.isSafeInteger(paidCents) && paidCents > 0 && currency.toLowerCase() === 'usd'
    ? paidCents * CREDITS_PER_CENT
    : 0;
}

export interface PaidTopup {
  org: OrgRef;
  /** The grant's ledger key: the business object paid for, so a repeat grants nothing twice. */
  grantKey: string;
  /** The processor's payment, when there is one: refunds and disputes take back through it. */
  paymentIntent: string | null;
  paidCents: number;
  credits: number;
  description: string;
  /** Extra fields of the `topup.succeeded` event. */
  event?: Record<string, unknown>;
  /** Who the payment's audit event names: the webhook's request, or svc itself. */
  origin: AuditOrigin;
}

/**
 * Grants a paid top-up once, records its payment for refunds, and tells the owner's endpoints, all in the
 * caller's transaction. True when this call granted it (false: it had been granted before).
 */
export async function grantPaidTopup(tx: Db, topup: PaidTopup): Promise<boolean> {
  const { org, grantKey, paymentIntent, paidCents, credits, origin } = topup;
  // The payment's row first (refunds.ts lock order), so a refund racing this grant waits or is seen.
  if (paymentIntent) await lockPayment(tx, paymentIntent);
  const target = await grantTarget(tx, org);
  const granted = await grantToOrg(tx, {
    key: grantKey,
    source: SOURCE_PURCHASES,
    ownerId: org.ownerId,
    orgKey: target,
    amount: credits,
    type: 'topup',
    description: topup.description,
  });
  if (paymentIntent)
    await recordPayment(
      tx,
      { paymentIntent, grantKey, orgKey: target, ownerId: org.ownerId, credits, amountCents: paidCents },
      origin,
    );
  if (granted)
    await recordAuditEvent(
      tx,
      paymentEvent(target, 'payment.succeeded', origin, {
        kind: 'topup',
        amount_cents: paidCents,
        credits,
        payment_intent: paymentIntent,
      }),
    );
  // The owner's endpoints hear of it, in this transaction (once, with the grant).
  if (granted)
    await emitEvent(tx, {
      orgKey: target,
      type: 'topup.succeeded',
      data: { amount_usd: paidCents, credits_granted: credits, ...topup.event },
    });
  return granted;
}

/** A payment's audit event (CONTRACT §11 `payment.succeeded|failed`), from the processor: actor `system`. */
export const paymentEvent = (
  orgKey: string,
  action: 'payment.succeeded' | 'payment.failed',
  origin: AuditOrigin,
  details: Record<string, unknown>,
) => ({ orgKey, action, origin, target: { type: 'client', id: clientIdOf(orgKey) }, details });
