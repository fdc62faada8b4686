import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { giveBack, lockPayment, num, takeBack, tokens, usd, type TakenBack } from './payment-reversals.js';
import { idOf, objectsAt, textAt, type StripeObject } from './stripe-object.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';

// Disputes (chargebacks): the other way money leaves a payment (docs/billing.md § Disputes).
//
// Stripe's Dispute names its `payment_intent`, its `amount` (usually the charge's, less when only part
// is disputed) and its `status`; the events say what happened to the money: `charge.dispute.funds_withdrawn`
// (the amount left our balance) and `charge.dispute.funds_reinstated` (it came back), with
// `charge.dispute.closed` carrying the verdict (`won`, `lost`, `warning_closed`). For tokens:
//   - withdrawal — funds_withdrawn, or a close as `lost`, whichever arrives first — takes back the
//     payment's tokens in proportion to the disputed amount, exactly like a refund (payment-reversals.ts),
//     once per dispute id: ledger keys `dispute:<id>` and `dispute:<id>:pool`;
//   - a win — funds_reinstated, or a close as `won` (or `warning_closed`, `prevented`) — gives back
//     exactly what the withdrawal took, once (`dispute:<id>:reinstated`, `…:reinstated:pool`); a win
//     before any withdrawal closes the dispute with nothing moved, and a withdrawal delivered after it
//     (out of order) moves nothing either;
//   - funds_reinstated on a `lost` dispute is Stripe returning the part of a partially refunded payment
//     that the refund already paid back (Stripe docs: disputes on partially refunded payments): the
//     take-back was capped at what had not been refunded, so nothing comes back.
// A withdrawal before the payment's grant waits as `awaiting_payment` and is applied by the grant
// (refunds.ts recordPayment), like a refund. Every path locks the payment's row, then the dispute's.

type DisputeState = 'open' | 'awaiting_payment' | 'withdrawn' | 'reinstated' | 'kept';

interface DisputeRow {
  id: string;
  payment_intent: string;
  amount_cents: unknown;
  state: DisputeState;
  credits: unknown;
  from_client: unknown;
  from_pool: unknown;
  shortfall: unknown;
  reversed_cents: unknown;
}

/** Statuses that end a dispute in our favour (the money stays or comes back). */
const KEPT_STATUSES = new Set(['won', 'warning_closed', 'prevented']);

type Intent = 'withdraw' | 'keep' | 'record';

/** What one event means for the tokens (see the header). */
function intentOf(eventType: string, status: string): Intent {
  if (eventType === 'charge.dispute.funds_withdrawn') return 'withdraw';
  if (eventType === 'charge.dispute.closed')
    return status === 'lost' ? 'withdraw' : KEPT_STATUSES.has(status) ? 'keep' : 'record';
  if (eventType === 'charge.dispute.funds_reinstated') return status === 'lost' ? 'record' : 'keep';
  return 'record';
}

/** One charge.dispute.* event (its Dispute object); returns the outcome recorded for the event. */
export async function receiveDispute(
  tx: Db,
  eventType: string,
  dispute: StripeObject,
  eventCreated: number,
  origin: AuditOrigin,
): Promise<string> {
  const id = typeof dispute.id === 'string' ? dispute.id : null;
  const pi = idOf(dispute.payment_intent);
  const amount = Number(dispute.amount);
  const status = textAt(dispute, 'status') ?? '';
  if (!id || !pi || !Number.isSafeInteger(amount) || amount <= 0) return 'dispute_unusable';
  const payment = await lockPayment(tx, pi);
  const opened = await queryRows<{ id: string }>(
    tx,
    sql`insert into billing_disputes (id, payment_intent, charge_id, amount_cents, processor_status, status_event_created, state)
        values (${id}, ${pi}, ${idOf(dispute.charge)}, ${amount}, ${status}, ${eventCreated}, 'open')
        on conflict (id) do nothing returning id`,
  );
  const audit = (action: 'dispute.opened' | 'dispute.closed', details: Record<string, unknown>) =>
    payment.org_key === null
      ? Promise.resolve()
      : recordAuditEvent(tx, {
          orgKey: payment.org_key,
          action,
          origin,
          target: { type: 'dispute', id },
          details: { payment_intent: pi, amount_cents: amount, ...details },
        });
  if (opened.length > 0) await audit('dispute.opened', { processor_status: status });
  // The newest event's status is shown; an older one delivered late does not overwrite it.
  await tx.execute(sql`
    update billing_disputes set processor_status = ${status}, status_event_created = ${eventCreated}
    where id = ${id} and status_event_created <= ${eventCreated}`);
  const [row] = await queryRows<DisputeRow>(
    tx,
    sql`select * from billing_disputes where id = ${id} for update`,
  );
  const intent = intentOf(eventType, status);

  if (intent === 'withdraw') {
    if (row!.state === 'withdrawn' || row!.state === 'awaiting_payment') return 'dispute_already_withdrawn';
    if (row!.state === 'kept' || row!.state === 'reinstated') return 'dispute_already_closed';
    // The amount the money left with; a withdrawal is one event, so this is the amount taken back.
    await tx.execute(sql`update billing_disputes set amount_cents = ${amount} where id = ${id}`);
    if (!payment.grant_key) {
      await tx.execute(sql`update billing_disputes set state = 'awaiting_payment' where id = ${id}`);
      return 'dispute_awaiting_payment';
    }
    if (status === 'lost') await audit('dispute.closed', { outcome: 'lost' });
    return withdraw(tx, id, amount, pi);
  }
  if (intent === 'keep') {
    if (row!.state === 'withdrawn') {
      await audit('dispute.closed', { outcome: 'won' });
      return reinstate(tx, row!);
    }
    if (row!.state === 'open' || row!.state === 'awaiting_payment') {
      await audit('dispute.closed', { outcome: 'won' });
      await tx.execute(sql`update billing_disputes set state = 'kept' where id = ${id}`);
      return 'dispute_kept';
    }
    return 'dispute_already_closed';
  }
  return 'dispute_recorded';
}

/** Takes back the disputed amount's tokens (payment and dispute rows locked by the caller). */
async function withdraw(
  tx: Db,
  disputeId: string,
  amountCents: number,
  paymentIntent: string,
): Promise<string> {
  const taken = await takeBack(tx, {
    paymentIntent,
    amountCents,
    key: `dispute:${disputeId}`,
    describe: (t) =>
      `Dispute: ${usd(amountCents)} withdrawn by the card issuer, ${tokens(t.credits)} tokens taken back` +
      (t.shortfall > 0 ? ` (${tokens(t.shortfall)} already spent)` : ''),
  });
  await tx.execute(sql`
    update billing_disputes set state = 'withdrawn', credits = ${taken.credits}, from_client = ${taken.fromClient},
                                from_pool = ${taken.fromPool}, shortfall = ${taken.shortfall},
                                reversed_cents = ${taken.reversedCents}, withdrawn_at = now()
    where id = ${disputeId}`);
  return taken.shortfall > 0 ? 'dispute_withdrawn_with_shortfall' : 'dispute_withdrawn';
}

/** Gives back exactly what the withdrawal took (payment and dispute rows locked by the caller). */
async function reinstate(tx: Db, row: DisputeRow): Promise<string> {
  const taken: TakenBack = {
    credits: num(row.credits),
    fromClient: num(row.from_client),
    fromPool: num(row.from_pool),
    shortfall: num(row.shortfall),
    reversedCents: num(row.reversed_cents),
  };
  await giveBack(tx, {
    paymentIntent: row.payment_intent,
    key: `dispute:${row.id}:reinstated`,
    taken,
    description: `Dispute won: ${usd(num(row.amount_cents))} reinstated, ${tokens(taken.fromClient + taken.fromPool)} tokens given back`,
  });
  await tx.execute(
    sql`update billing_disputes set state = 'reinstated', reinstated_at = now() where id = ${row.id}`,
  );
  return 'dispute_reinstated';
}

/** Withdrawals that arrived before their payment's grant, applied by the grant's transaction. */
export async function applyWaitingDisputes(tx: Db, paymentIntent: string): Promise<string[]> {
  const waiting = await queryRows<{ id: string; amount_cents: unknown }>(
    tx,
    sql`select id, amount_cents from billing_disputes where payment_intent = ${paymentIntent} and state = 'awaiting_payment'
        order by created_at, id for update`,
  );
  for (const d of waiting) await withdraw(tx, d.id, num(d.amount_cents), paymentIntent);
  return waiting.map((d) => d.id);
}

/**
 * The event a dispute re-fetched by reconciliation stands for: its verdict when closed, else a
 * withdrawal when a balance transaction took money out (Dispute.balance_transactions: zero, one or two,
 * withdrawn then reinstated), else nothing to apply.
 */
export function disputeEventFor(dispute: StripeObject): string | null {
  const status = textAt(dispute, 'status') ?? '';
  if (status === 'lost' || KEPT_STATUSES.has(status)) return 'charge.dispute.closed';
  const moves = objectsAt(dispute, 'balance_transactions');
  if (moves.some((b) => Number(b.amount) < 0)) return 'charge.dispute.funds_withdrawn';
  return null;
}
