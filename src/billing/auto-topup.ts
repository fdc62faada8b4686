import { sql } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { queryRows, type Db } from '../db/client.js';
import type { Logger } from '../log.js';
import { clientIdOf } from '../ids.js';
import { handleCrossings, type BalanceCrossing } from './balance-crossings.js';
import { creditsPaidFor, grantPaidTopup, paymentEvent } from './paid-grant.js';
import { idOf, textAt, type StripeObject } from './stripe-object.js';
import { usdOfCents } from './par.js';
import { receiptStep, recordAutoTopupInvoice } from './topup-receipt.js';
import type { AfterCommit, MailDeps } from './after-commit.js';
import { emitEvent } from '../events/outbox.js';
import { recordAuditEvent } from '../audit/record.js';
import { SYSTEM_ORIGIN, type AuditOrigin } from '../audit/context.js';
import { autoTopupFailedMail } from '../mail/auto-topup-mail.js';
import {
  COUNTED_CHARGES,
  UTC_MONTH_START,
  WATCH_AUTO_TOPUP,
  disableAutoTopup,
} from './auto-topup-settings.js';
import { transaction } from '../db/transaction.js';
import { autoTopupPasses } from '../metrics/registry.js';

// Auto top-up (docs/billing.md, "Auto top-up"). The owner opts in per organization with
// a trigger balance, an amount and a monthly cap. Three steps, each exactly once:
//  1. the fall below the trigger is recorded once, in the transaction that moved the balance
//     (balance-crossings.ts, purpose WATCH_AUTO_TOPUP);
//  2. the crossing's handler (claimed SKIP LOCKED by one process) writes one charge row keyed by the
//     crossing, under the org's auto-top-up row lock, where the monthly cap is checked (queueCharge);
//  3. one process claims the charge and asks the processor for a PaymentIntent confirmed off-session, with
//     an idempotency key derived from the org and the crossing: a retry (a lost answer, a crashed process)
//     gets the same intent (chargePending).
// The tokens come only from the processor's payment_intent.succeeded, through the webhook like any
// top-up: the amount received, at par, for an intent svc asked for (autoTopupPaid). A decline turns auto
// top-up off and mails the owner.

/** A charge claimed this long ago and not answered (its process died) is tried again, with the same key. */
export const CHARGE_RECLAIM_SECONDS = 120;
/** How often each process looks for crossings and charges to handle. */
export const AUTO_TOPUP_POLL_MS = 2_000;

/**
 * Step 2, in the crossing's own transaction: one charge row per crossing (`atu_<crossing id>`), pending,
 * or skipped when the month's cap would be passed. The org's row is locked first, so two crossings of
 * one org handled at once by two processes see each other's charges.
 */
export async function queueCharge(tx: Db, crossing: BalanceCrossing): Promise<void> {
  const [cfg] = await queryRows<{ amount_cents: unknown; monthly_cap_cents: unknown }>(
    tx,
    sql`select amount_cents, monthly_cap_cents from auto_topups where org_key = ${crossing.orgKey} and enabled for update`,
  );
  if (!cfg) return; // turned off since: the crossing is handled with nothing to do
  const amount = Number(cfg.amount_cents);
  const [month] = await queryRows<{ charged: unknown }>(
    tx,
    sql`select coalesce(sum(amount_cents), 0) as charged from auto_topup_charges
        where org_key = ${crossing.orgKey} and ${COUNTED_CHARGES} and created_at >= ${UTC_MONTH_START}`,
  );
  const [customer] = await queryRows<{ customer_id: string }>(
    tx,
    sql`select customer_id from billing_customers where org_key = ${crossing.orgKey}`,
  );
  const overCap = Number(month!.charged) + amount > Number(cfg.monthly_cap_cents);
  const status = overCap ? 'skipped' : 'pending';
  await tx.execute(
    sql`insert into auto_topup_charges (id, org_key, crossing_id, customer_id, amount_cents, status, failure)
        values (${`atu_${crossing.id}`}, ${crossing.orgKey}, ${crossing.id}, ${customer?.customer_id ?? null},
                ${amount}, ${status}, ${overCap ? 'monthly cap reached' : null})
        on conflict (crossing_id) do nothing`,
  );
}

interface ChargeRow {
  id: string;
  org_key: string;
  crossing_id: unknown;
  customer_id: string | null;
  amount_cents: unknown;
}

/** Step 3: claims and charges the pending charges, one at a time; returns how many were sent. */
export async function chargePending(deps: Deps, deliverDev?: DeliverDev): Promise<number> {
  const processor = deps.billing.processor;
  if (!processor) return 0;
  let sent = 0;
  for (let n = 0; n < 20; n++) {
    // A guarded claim, committed before the processor is asked: another process skips it, and a
    // webhook arriving meanwhile finds the row.
    const [charge] = await queryRows<ChargeRow>(
      deps.db,
      sql`update auto_topup_charges set status = 'charging', attempts = attempts + 1, claimed_at = now()
          where id = (select id from auto_topup_charges
                      where status = 'pending'
                         or (status = 'charging' and claimed_at < now() - make_interval(secs => ${CHARGE_RECLAIM_SECONDS}))
                      order by created_at limit 1 for update skip locked)
          returning id, org_key, crossing_id, customer_id, amount_cents`,
    );
    if (!charge) return sent;
    sent++;
    if (!charge.customer_id) {
      await declined(deps, charge, null, 'no saved payment method');
      continue;
    }
    const result = await processor
      .chargeOffSession({
        customerId: charge.customer_id,
        amountCents: Number(charge.amount_cents),
        idempotencyKey: `auto-topup:${charge.org_key}:${String(charge.crossing_id)}`,
        metadata: { org_key: charge.org_key, auto_topup_charge: charge.id },
      })
      .catch((err: unknown) => {
        // The processor unreachable: the claim lapses and the same key is tried again.
        deps.log.warn({ err, charge: charge.id }, 'auto top-up charge not sent; tried again later');
        return null;
      });
    if (!result) continue;
    if (result.status === 'failed') {
      await declined(deps, charge, result.id, result.failure ?? 'the card was declined');
      continue;
    }
    await deps.db.execute(
      sql`update auto_topup_charges set payment_intent = coalesce(payment_intent, ${result.id}),
            status = case when status = 'charging' then 'charged' else status end
          where id = ${charge.id}`,
    );
    // The dev processor has no webhook of its own: it delivers the signed event as its pages do.
    if (deliverDev && result.id && result.status === 'succeeded')
      await deliverDev(
        'payment_intent.succeeded',
        {
          id: result.id,
          object: 'payment_intent',
          amount: Number(charge.amount_cents),
          amount_received: Number(charge.amount_cents),
          currency: 'usd',
          customer: charge.customer_id,
          status: 'succeeded',
          metadata: { org_key: charge.org_key, auto_topup_charge: charge.id },
        },
        SYSTEM_ORIGIN,
      );
    // Its invoice row (written with the grant) links the dev processor's invoice page, as a checkout's does.
    if (deliverDev)
      await deps.db.execute(
        sql`update billing_invoices set invoice_pdf = ${`${deps.config.v2Url}/dev/invoices/in_${charge.id}`}
            where id = ${`in_${charge.id}`} and invoice_pdf is null`,
      );
  }
  return sent;
}

export type DeliverDev = (
  type: string,
  object: Record<string, unknown>,
  origin: AuditOrigin,
) => Promise<unknown>;

/** A declined charge: recorded, auto top-up turned off, the owner told (by mail). */
async function declined(deps: Deps, charge: ChargeRow, intent: string | null, reason: string) {
  const owner = await transaction(deps.db, async (tx) =>
    failCharge(tx, charge.id, intent, reason, ['charging', 'charged'], SYSTEM_ORIGIN),
  );
  if (owner) await mailChargeFailed(deps, owner, reason);
}

interface FailedCharge {
  chargeId: string;
  orgKey: string;
  amountCents: number;
  email: string;
  name: string;
}

/**
 * In the caller's transaction: the charge (if still in one of `from`) becomes `failed`, auto top-up is
 * turned off with the reason, and topup.failed is emitted (in the same transaction).
 * Returns whom to mail once it committed, or null when the charge had already ended (nothing done).
 */
async function failCharge(
  tx: Db,
  chargeId: string,
  intent: string | null,
  reason: string,
  from: string[],
  origin: AuditOrigin,
): Promise<FailedCharge | null> {
  const [charge] = await queryRows<{ org_key: string; amount_cents: unknown }>(
    tx,
    sql`update auto_topup_charges set status = 'failed', failure = ${reason},
          payment_intent = coalesce(payment_intent, ${intent})
        where id = ${chargeId} and status in (${sql.join(
          from.map((f) => sql`${f}`),
          sql`, `,
        )})
        returning org_key, amount_cents`,
  );
  if (!charge) return null;
  await disableAutoTopup(tx, charge.org_key, `charge declined: ${reason}`, origin);
  await recordAuditEvent(
    tx,
    paymentEvent(charge.org_key, 'payment.failed', origin, {
      kind: 'auto_topup',
      charge: chargeId,
      amount_cents: Number(charge.amount_cents),
      reason,
    }),
  );
  await emitEvent(tx, {
    orgKey: charge.org_key,
    type: 'topup.failed',
    data: { amount_usd: Number(charge.amount_cents), auto_topup: true, reason },
  });
  const [row] = await queryRows<{ email: string; name: string }>(
    tx,
    sql`select u.email, o.name from orgs o join users u on u.id = o.owner_id where o.id = ${charge.org_key}`,
  );
  return row ? { chargeId, orgKey: charge.org_key, amountCents: Number(charge.amount_cents), ...row } : null;
}

/** The owner's mail, after the failure committed (at most once: a crash at this moment loses it). */
async function mailChargeFailed(deps: MailDeps, owner: FailedCharge, reason: string): Promise<void> {
  const mail = autoTopupFailedMail({
    to: owner.email,
    orgName: owner.name,
    amountCents: owner.amountCents,
    reason,
    link: `${deps.config.v2Url}/account/clients/${clientIdOf(owner.orgKey)}/billing`,
  });
  await deps.mailer
    .send(mail)
    .catch((err: unknown) =>
      deps.log.warn({ err, charge: owner.chargeId }, 'auto top-up failure mail not sent'),
    );
}

/**
 * The charge row of an intent svc asked for (found by the intent id or by the charge id svc put in its
 * metadata, for the same customer), locked; or why there is none ('not_auto_topup': a checkout's or an
 * unknown intent; 'unknown_intent': one that names a charge but does not match it).
 */
async function chargeOfIntent(
  tx: Db,
  intent: StripeObject,
  log: Logger,
): Promise<
  { charge: { id: string; org_key: string; owner_id: string; status: string }; intentId: string } | string
> {
  const intentId = String(intent.id);
  const chargeId = textAt(intent, 'metadata', 'auto_topup_charge');
  const [charge] = await queryRows<{
    id: string;
    org_key: string;
    customer_id: string | null;
    payment_intent: string | null;
    owner_id: string;
    status: string;
  }>(
    tx,
    sql`select c.id, c.org_key, c.customer_id, c.payment_intent, c.status, o.owner_id
        from auto_topup_charges c join orgs o on o.id = c.org_key
        where c.payment_intent = ${intentId} or c.id = ${chargeId ?? ''}
        order by (c.payment_intent = ${intentId}) desc nulls last limit 1 for update of c`,
  );
  if (!charge) return 'not_auto_topup';
  if (
    charge.customer_id !== idOf(intent.customer) ||
    (charge.payment_intent !== null && charge.payment_intent !== intentId)
  ) {
    log.warn(
      { intentId, charge: charge.id },
      'payment intent does not match the auto top-up svc made: nothing changed',
    );
    return 'unknown_intent';
  }
  return { charge, intentId };
}

/**
 * The webhook's payment_intent.payment_failed for an auto top-up: an intent that went `processing` (a
 * bank debit, say) and failed later. As a decline at once: the charge is failed (no longer counted in the
 * month's cap), auto top-up turned off, topup.failed emitted, and the owner mailed once this commits
 * (the `mail` step the webhook runs after its transaction). No tokens: they only ever come from payment_intent.succeeded. A charge already granted
 * or already failed is left as it is (a repeat, or events out of order).
 */
export async function autoTopupFailed(
  tx: Db,
  intent: StripeObject,
  log: Logger,
  origin: AuditOrigin,
): Promise<{ outcome: string; mail?: AfterCommit }> {
  const found = await chargeOfIntent(tx, intent, log);
  if (typeof found === 'string') return { outcome: found };
  const reason =
    textAt(intent, 'last_payment_error', 'message') ??
    (textAt(intent, 'last_payment_error', 'code') ?? 'the payment failed').replace(/_/g, ' ');
  const owner = await failCharge(
    tx,
    found.charge.id,
    found.intentId,
    reason,
    ['pending', 'charging', 'charged'],
    origin,
  );
  if (!owner) return { outcome: `auto_topup_already_${found.charge.status}` };
  return { outcome: 'auto_topup_failed', mail: (deps) => mailChargeFailed(deps, owner, reason) };
}

/**
 * The webhook's payment_intent.succeeded: the tokens of an auto top-up svc asked for (its charge row,
 * found by the intent or by the charge id svc put in its metadata, for the same customer), the amount
 * received at par, once per charge (grant key `grant:autotopup:<charge id>`). Any other intent (a
 * checkout's, which grants through its session) is not ours here.
 */
export async function autoTopupPaid(
  tx: Db,
  intent: StripeObject,
  log: Logger,
  after: AfterCommit[],
  origin: AuditOrigin,
): Promise<string> {
  const found = await chargeOfIntent(tx, intent, log);
  if (typeof found === 'string') return found;
  const { charge, intentId } = found;
  const paidCents = Number(intent.amount_received ?? 0);
  const credits = creditsPaidFor(paidCents, textAt(intent, 'currency') ?? 'usd');
  await tx.execute(
    sql`update auto_topup_charges set status = ${credits > 0 ? 'succeeded' : 'failed'}, payment_intent = ${intentId}
        where id = ${charge.id}`,
  );
  if (!(credits > 0)) return 'no_amount';
  const granted = await grantPaidTopup(tx, {
    org: { orgKey: charge.org_key, ownerId: charge.owner_id },
    grantKey: `grant:autotopup:${charge.id}`,
    paymentIntent: intentId,
    paidCents,
    credits,
    description: `Auto top-up: ${usdOfCents(paidCents)}`,
    event: { auto_topup: true },
    origin,
  });
  if (!granted) return 'already_granted';
  // The same records a checkout's top-up leaves: an invoice row and the owner's receipt.
  await recordAutoTopupInvoice(tx, {
    chargeId: charge.id,
    orgKey: charge.org_key,
    customerId: idOf(intent.customer),
    paymentIntent: intentId,
    paidCents,
  });
  const receipt = await receiptStep(tx, { orgKey: charge.org_key, paidCents, credits, auto: true });
  if (receipt) after.push(receipt);
  return 'granted';
}

/** One pass of both steps (the worker's, and what tests run on two connections at once). */
export async function runAutoTopups(deps: Deps, deliverDev?: DeliverDev): Promise<void> {
  await handleCrossings(deps.db, [WATCH_AUTO_TOPUP], queueCharge, 50, (err) =>
    deps.log.warn({ err }, 'auto top-up crossing not handled; tried again later'),
  );
  await chargePending(deps, deliverDev);
}

/** Each process runs the passes every AUTO_TOPUP_POLL_MS until shutdown. */
export function startAutoTopups(deps: Deps, deliverDev?: DeliverDev): void {
  let running: Promise<void> | null = null;
  let closed = false;
  const timer = setInterval(() => {
    if (running || closed) return;
    running = runAutoTopups(deps, deliverDev)
      .then(() => autoTopupPasses.inc())
      .catch((err: unknown) => deps.log.warn({ err }, 'auto top-up pass failed'))
      .finally(() => {
        running = null;
      });
  }, AUTO_TOPUP_POLL_MS);
  timer.unref();
  deps.onClose(async () => {
    closed = true;
    clearInterval(timer);
    await running;
  });
}
