import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { errorOf } from '../http/errors.js';
import { BILLING_ERRORS } from './errors.js';
import { integerCursor, unknownCursor } from '../http/pagination.js';
import { clientIdOf } from '../ids.js';
import type { Billing } from './hooks.js';
import type { PaymentMethodView, PaymentProcessor } from './processor.js';
import { CREDITS_PER_CENT } from './service.js';

// Checkout, top-ups, the portal, payment methods, invoices and subscription state (interface document:
// Billing endpoints; CONTRACT §8). Payment payloads are shaped here so processor ids never leak beyond
// the fields the document names.

const num = (v: unknown): number => Number(v ?? 0);

export function requireProcessor(billing: Billing): PaymentProcessor {
  if (!billing.processor) {
    throw errorOf(BILLING_ERRORS, 'PAYMENTS_NOT_CONFIGURED');
  }
  return billing.processor;
}

async function findCustomer(db: Db, orgKey: string): Promise<string | null> {
  const [row] = await queryRows<{ customer_id: string }>(
    db,
    sql`select customer_id from billing_customers where org_key = ${orgKey}`,
  );
  return row?.customer_id ?? null;
}

/** One processor customer per client, created on first need; a racing second creation reads the first. */
export async function ensureCustomer(
  db: Db,
  processor: PaymentProcessor,
  orgKey: string,
  email: string | undefined,
): Promise<string> {
  const existing = await findCustomer(db, orgKey);
  if (existing) return existing;
  const customerId = await processor.createCustomer({ orgKey, email });
  await db.execute(sql`insert into billing_customers (org_key, customer_id, email) values (${orgKey}, ${customerId}, ${email ?? null})
                       on conflict do nothing`);
  return (await findCustomer(db, orgKey)) ?? customerId;
}

export interface StartCheckout {
  orgKey: string;
  userId: string;
  email: string | undefined;
  kind: 'topup' | 'subscription';
  amountCents?: number;
  priceId: string;
  successUrl: string;
  cancelUrl: string;
}

export async function startCheckout(
  db: Db,
  billing: Billing,
  input: StartCheckout,
): Promise<{ session_id: string; checkout_url: string }> {
  const processor = requireProcessor(billing);
  if (input.kind === 'subscription') {
    if (await activeSubscription(db, input.orgKey)) throw alreadySubscribed();
    await closeOpenProCheckouts(db, processor, input.orgKey);
  }
  const customerId = await ensureCustomer(db, processor, input.orgKey, input.email);
  const amountCents = input.kind === 'topup' ? input.amountCents! : 0;
  const credits = amountCents * CREDITS_PER_CENT;
  const session = await processor.createCheckoutSession({
    orgKey: input.orgKey,
    customerId,
    kind: input.kind,
    amountCents,
    credits,
    priceId: input.priceId,
    successUrl: input.successUrl,
    cancelUrl: input.cancelUrl,
  });
  await db.execute(sql`
    insert into billing_checkout_sessions (id, org_key, customer_id, kind, credits, amount_cents, success_url, cancel_url, created_by)
    values (${session.id}, ${input.orgKey}, ${customerId}, ${input.kind}, ${credits}, ${amountCents}, ${input.successUrl},
            ${input.cancelUrl}, ${input.userId})
    on conflict (id) do nothing`);
  return { session_id: session.id, checkout_url: session.url };
}

const alreadySubscribed = () => errorOf(BILLING_ERRORS, 'ALREADY_SUBSCRIBED');

/**
 * A client has at most one Pro checkout that can still be paid: a new one first closes the client's
 * others at the processor, else two checkout pages opened before either was paid could both be paid (two
 * subscriptions, two charges). One that was paid meanwhile (its webhooks still on their way) refuses the
 * new checkout, as an active subscription does.
 */
async function closeOpenProCheckouts(db: Db, processor: PaymentProcessor, orgKey: string) {
  const open = await queryRows<{ id: string }>(
    db,
    sql`select id from billing_checkout_sessions where org_key = ${orgKey} and kind = 'subscription' and status in ('open', 'paying')`,
  );
  for (const { id } of open) {
    if ((await processor.expireCheckoutSession(id)) === 'complete') throw alreadySubscribed();
    // Stripe's expiry reaches our row by its webhook too; marked now, the next checkout skips it.
    await db.execute(
      sql`update billing_checkout_sessions set status = 'expired' where id = ${id} and status = 'open'`,
    );
  }
}

export async function openPortal(
  db: Db,
  billing: Billing,
  orgKey: string,
  email: string,
  returnUrl: string,
): Promise<string> {
  const processor = requireProcessor(billing);
  const customerId = await ensureCustomer(db, processor, orgKey, email);
  return processor.createPortalSession({ customerId, returnUrl });
}

export async function paymentMethods(db: Db, billing: Billing, orgKey: string) {
  const customerId = await findCustomer(db, orgKey);
  if (!customerId || !billing.processor) return [];
  const methods: PaymentMethodView[] = await billing.processor.listPaymentMethods(customerId);
  return methods.map((m) => ({ ...m, org_id: clientIdOf(orgKey) }));
}

const ACTIVE = ['active', 'trialing', 'past_due', 'unpaid'];

interface SubscriptionRow {
  id: string;
  org_key: string;
  plan_name: string;
  status: string;
  current_period_start: unknown;
  current_period_end: unknown;
  cancel_at_period_end: boolean;
}

async function activeSubscription(db: Db, orgKey: string): Promise<SubscriptionRow | null> {
  const [row] = await queryRows<SubscriptionRow>(
    db,
    sql`select * from billing_subscriptions where org_key = ${orgKey}
          and status in (${sql.join(
            ACTIVE.map((s) => sql`${s}`),
            sql`, `,
          )})
        order by updated_at desc limit 1`,
  );
  return row ?? null;
}

/** The client's current subscription; 404 `subscription_not_found` when it has none (CONTRACT §3). */
export async function getSubscription(db: Db, orgKey: string) {
  const row = await activeSubscription(db, orgKey);
  if (!row) throw errorOf(BILLING_ERRORS, 'subscription_not_found');
  return {
    org_id: clientIdOf(orgKey),
    plan_name: row.plan_name,
    status: row.status,
    current_period_start: num(row.current_period_start),
    current_period_end: num(row.current_period_end),
    cancel_at_period_end: Boolean(row.cancel_at_period_end),
    payment_subscription_id: row.id,
  };
}

/**
 * A client's invoices, newest first (id breaking ties), read in the order of billing_invoices_org_idx;
 * `startingAfter` is an invoice id of this client (CONTRACT §3).
 */
export async function listInvoices(
  db: Db,
  orgKey: string,
  limit: number,
  offset: number,
  startingAfter?: string,
) {
  let after = sql``;
  if (startingAfter !== undefined) {
    const [c] = await queryRows<{ created_at_unix: unknown }>(
      db,
      sql`select created_at_unix from billing_invoices where id = ${startingAfter} and org_key = ${orgKey}`,
    );
    if (!c) throw unknownCursor();
    after = sql`and (created_at_unix, id) < (${num(c.created_at_unix)}, ${startingAfter})`;
  }
  const rows = await queryRows<Record<string, unknown>>(
    db,
    sql`select * from billing_invoices where org_key = ${orgKey} ${after}
        order by created_at_unix desc, id desc limit ${limit} offset ${offset}`,
  );
  return rows.map((r) => ({
    id: String(r.id),
    org_id: clientIdOf(orgKey),
    amount_due_cents: num(r.amount_due_cents),
    amount_paid_cents: num(r.amount_paid_cents),
    status: String(r.status),
    currency: String(r.currency),
    invoice_pdf: (r.invoice_pdf as string | null) ?? '',
    created_at: num(r.created_at_unix),
    // Automatically charged invoices have no due date at the processor: they are due when issued.
    due_date: r.due_date === null || r.due_date === undefined ? num(r.created_at_unix) : num(r.due_date),
    ...(r.payment_failed_at ? { payment_failed: true } : {}),
  }));
}

/** The types a client's list shows: billing_entries_org_shown_idx has this predicate, word for word. */
const SHOWN = sql`type in ('trial', 'subscription_credit', 'topup', 'usage', 'refund')`;

/**
 * The ledger rows a client's list shows (interface document: Transaction), newest first (-id: the order
 * of billing_entries_org_shown_idx, which says why), from the client's newest row or from `startingAfter`
 * (a transaction id of this list: CONTRACT §3), so a page never reads another client's rows.
 */
export async function listTransactions(
  db: Db,
  orgKey: string,
  limit: number,
  offset: number,
  startingAfter?: string,
) {
  let after = sql``;
  if (startingAfter !== undefined) {
    const id = integerCursor(startingAfter);
    const [c] = await queryRows<{ id: unknown }>(
      db,
      sql`select id from billing_entries where id = ${id} and org_key = ${orgKey} and ${SHOWN}`,
    );
    if (!c) throw unknownCursor();
    after = sql`and -id > ${-id}`;
  }
  // Amounts arrive as strings or numbers (bigint columns, by driver); description is text or null.
  const rows = await queryRows<{
    id: unknown;
    org_amount: unknown;
    type: string;
    org_balance_after: unknown;
    description: string | null;
    created_at: string | Date;
  }>(
    db,
    sql`select id, org_amount, type, org_balance_after, description, created_at from billing_entries
        where org_key = ${orgKey} and ${SHOWN} ${after}
        order by -id limit ${limit} offset ${offset}`,
  );
  return rows.map((r) => ({
    id: num(r.id),
    org_id: clientIdOf(orgKey),
    amount_credits: num(r.org_amount),
    transaction_type: r.type,
    balance_after_credits: num(r.org_balance_after),
    description: r.description ?? '',
    created_at: Math.floor(new Date(r.created_at).getTime() / 1000),
  }));
}
