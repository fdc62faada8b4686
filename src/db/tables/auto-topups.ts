import { sql } from 'drizzle-orm';
import { bigint, boolean, check, index, integer, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

// Auto top-up (docs/billing.md, "Auto top-up"): when an org's balance falls below the
// owner's trigger, svc charges the saved payment method off-session, at most `monthly_cap_cents` a UTC
// month; the grant arrives through the webhook like any top-up's.

/** One row per org whose owner opted in (or was opted out by a declined charge). */
export const autoTopups = pgTable(
  'auto_topups',
  {
    orgKey: text('org_key').primaryKey(),
    enabled: boolean('enabled').notNull().default(true),
    /** Charge when the balance falls below this many tokens. */
    triggerCredits: bigint('trigger_credits', { mode: 'number' }).notNull(),
    /** Each charge, in cents (granted at par: CREDITS_PER_CENT tokens a cent). */
    amountCents: integer('amount_cents').notNull(),
    /** At most this much is charged per UTC month, in cents. */
    monthlyCapCents: integer('monthly_cap_cents').notNull(),
    /** Why it was turned off by svc (a declined charge), for the owner to see. */
    disabledReason: text('disabled_reason'),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    check(
      'auto_topups_amounts',
      sql`${t.triggerCredits} >= 0 and ${t.amountCents} > 0 and ${t.monthlyCapCents} >= 0`,
    ),
  ],
);

export const AUTO_TOPUP_STATUSES = [
  'pending',
  'charging',
  'charged',
  'succeeded',
  'failed',
  'skipped',
] as const;

/**
 * One row per crossing that asked for a charge (its id is derived from the crossing: exactly one charge
 * per crossing, whatever repeats). `pending` → `charging` (claimed by one process) → `charged` (the processor took it) → `succeeded` (the
 * webhook granted it) or `failed` (declined); `skipped`: the monthly cap (or a missing customer) stopped it.
 */
export const autoTopupCharges = pgTable(
  'auto_topup_charges',
  {
    id: text('id').primaryKey(),
    orgKey: text('org_key').notNull(),
    crossingId: bigint('crossing_id', { mode: 'number' }).notNull().unique(),
    customerId: text('customer_id'),
    amountCents: integer('amount_cents').notNull(),
    /** The processor's PaymentIntent, once it answered (the webhook may name it first). */
    paymentIntent: text('payment_intent').unique(),
    status: text('status', { enum: AUTO_TOPUP_STATUSES }).notNull().default('pending'),
    failure: text('failure'),
    attempts: integer('attempts').notNull().default(0),
    claimedAt: timestamp('claimed_at', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('auto_topup_charges_org_idx').on(t.orgKey, t.createdAt)],
);
