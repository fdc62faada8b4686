import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  boolean,
  check,
  index,
  integer,
  pgTable,
  text,
  timestamp,
} from 'drizzle-orm/pg-core';

// The token ledger (interface document: Token economics; CONTRACT §8), shaped like a double-entry
// ledger: every movement is one immutable row moving `amount` from one account to another, so each
// stored balance is the sum of its rows and all balances together sum to zero (checked by
// `npm run billing:reconcile`).
//
// Account ids (text, so that "lock rows in a fixed order" is simply ORDER BY id):
//   org:<orgKey>    a client's allocation (inside: never below zero, holds included)
//   pool:<userId>   an owner's unallocated pool (inside)
//   sink:<orgKey>   usage consumed by that client (outside; one per client so settles never share a row)
//   src:trial, src:purchases   where granted tokens come from (outside, negative)
//   debt:<userId>   minus what an owner owes (outside, ≤ 0; src/billing/debt.ts)

export const ACCOUNT_KINDS = ['org', 'pool', 'sink', 'source', 'debt'] as const;

export const billingAccounts = pgTable(
  'billing_accounts',
  {
    id: text('id').primaryKey(),
    kind: text('kind', { enum: ACCOUNT_KINDS }).notNull(),
    /** Owner of a pool, or of the client an org/sink account belongs to. */
    userId: text('user_id'),
    orgKey: text('org_key'),
    balance: bigint('balance', { mode: 'number' }).notNull().default(0),
    /** Sum of the active holds on an org account (reserve-then-settle, CONTRACT §8). */
    held: bigint('held', { mode: 'number' }).notNull().default(0),
    /** allocation_credits: the budget the owner last allocated to the client (interface document). */
    allocation: bigint('allocation', { mode: 'number' }).notNull().default(0),
    /**
     * The thresholds watched on this org account, ascending, or null (src/db/tables/balance-watches.ts):
     * a copy kept by a trigger, so that the balance's own update can tell a crossing with one comparison.
     */
    watchThresholds: bigint('watch_thresholds', { mode: 'number' }).array(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    // Inside accounts never go below zero, holds included (a ledger invariant).
    check(
      'billing_accounts_inside_non_negative',
      sql`${t.kind} not in ('org', 'pool') or (${t.held} >= 0 and ${t.balance} >= ${t.held})`,
    ),
    // Holds sit on a client's account, and on its owner's pool once the client was deleted with calls in
    // flight (src/billing/deleted-client.ts).
    check('billing_accounts_held_only_inside', sql`${t.kind} in ('org', 'pool') or ${t.held} = 0`),
    index('billing_accounts_user_idx').on(t.userId),
  ],
);

export const ENTRY_TYPES = [
  'trial',
  'subscription_credit',
  'topup',
  'usage',
  'refund',
  'allocate',
  'reclaim',
  'debt',
  'debt_payment',
] as const;
/** The transaction types the API shows (interface document: Transaction). */
export const SHOWN_TYPES = ['trial', 'subscription_credit', 'topup', 'usage', 'refund'] as const;

export const billingEntries = pgTable(
  'billing_entries',
  {
    /** The Transaction id the API shows (an integer, CONTRACT §2). */
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    /** Idempotency key: `grant:invoice:<id>`, `grant:session:<id>`, `usage:<request id>`, `trial:<user id>`, … */
    key: text('key').notNull().unique(),
    // Both accounts are billing_accounts ids, with no foreign key (decision 0138): every writer names
    // accounts it has just locked or written (ledger.ts transfer, the settle's svc_settle_holds), accounts
    // are never deleted, and reconciliation's sum over all accounts would show a row naming none.
    fromAccount: text('from_account').notNull(),
    toAccount: text('to_account').notNull(),
    amount: bigint('amount', { mode: 'number' }).notNull(),
    type: text('type', { enum: ENTRY_TYPES }).notNull(),
    /** The client whose transaction list shows this row (null for pool-side rows). */
    orgKey: text('org_key'),
    /** Signed amount as that client sees it (usage negative, CONTRACT §3). */
    orgAmount: bigint('org_amount', { mode: 'number' }),
    /** That client's balance right after this row (balance_after_credits). */
    orgBalanceAfter: bigint('org_balance_after', { mode: 'number' }),
    description: text('description').notNull().default(''),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    check('billing_entries_positive', sql`${t.amount} > 0`),
    check('billing_entries_two_accounts', sql`${t.fromAccount} <> ${t.toAccount}`),
    // A client's transaction list (payments.ts listTransactions): only the shown types, newest first. The
    // key is -id and the list orders by -id: an order the primary key cannot give, so the planner cannot
    // walk the primary key backwards filtering by client, reading every row any client wrote since
    // (1,145 ms a page at 10M rows; its estimate assumes a client's rows are spread evenly).
    index('billing_entries_org_shown_idx')
      .on(t.orgKey, sql`(-${t.id})`)
      .where(sql`${t.type} in ('trial', 'subscription_credit', 'topup', 'usage', 'refund')`),
    // The allocation moves between an owner's pool and a client (the billing page's "Allocation moves",
    // src/portal/allocation-card.ts), newest first: written only by an allocation, never by a call.
    index('billing_entries_org_moves_idx')
      .on(t.orgKey, sql`(-${t.id})`)
      .where(sql`${t.type} in ('allocate', 'reclaim')`),
    // The grants into an owner's pool (lifetime_granted_credits, ledger.ts lifetimeGrantedSql): the only
    // read by account. Partial, so a call's `usage` row (client to sink) adds no entry to it, and no index
    // on from_account at all: no statement reads by it (decision 0132).
    index('billing_entries_grants_idx')
      .on(t.toAccount)
      .where(sql`${t.fromAccount} like 'src:%'`),
  ],
);

export const HOLD_STATUSES = ['held', 'settled', 'voided', 'expired'] as const;

/** Reservations for in-flight model calls (CONTRACT §8: reserve-then-settle). */
export const billingHolds = pgTable(
  'billing_holds',
  {
    requestId: text('request_id').primaryKey(),
    // No foreign key (decision 0139): a hold is inserted only under its account's lock (svc_reserve_holds,
    // the settle's next hold) and moved only to an account locked first (deleted-client.ts).
    accountId: text('account_id').notNull(),
    orgKey: text('org_key').notNull(),
    userId: text('user_id'),
    amount: bigint('amount', { mode: 'number' }).notNull(),
    status: text('status', { enum: HOLD_STATUSES }).notNull().default('held'),
    debited: bigint('debited', { mode: 'number' }).notNull().default(0),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    closedAt: timestamp('closed_at', { withTimezone: true }),
    /**
     * Counted against a member or token budget (member_budget_holds has its rows): only such a hold's close
     * runs the give-back trigger (src/db/custom/member-budgets.sql; decision 0133).
     */
    budgeted: boolean('budgeted').notNull().default(false),
  },
  (t) => [
    check('billing_holds_amounts', sql`${t.amount} >= 0 and ${t.debited} >= 0`),
    // The live holds, by account: a reserve releasing its client's expired holds, and the sweep
    // (spend.ts expireStaleHolds), which reads this whole partial index: it holds only the calls in
    // flight, so a second index on expires_at alone cost every hold an entry for nothing (decision 0132).
    index('billing_holds_open_idx')
      .on(t.accountId, t.expiresAt)
      .where(sql`${t.status} = 'held'`),
    // Retention (src/billing/hold-retention.ts) deletes the oldest closed holds: without this index each
    // reconcile run read every hold to find none old enough (docs/scale.md). A settle's update
    // is not HOT anyway (status is in the partial indexes' predicates), so this is one more entry per call.
    index('billing_holds_closed_idx')
      .on(t.closedAt)
      .where(sql`${t.status} <> 'held'`),
  ],
);

// Processor state (Stripe, or the dev processor that records the same objects).

/** One processor customer per client. */
export const billingCustomers = pgTable('billing_customers', {
  orgKey: text('org_key').primaryKey(),
  customerId: text('customer_id').notNull().unique(),
  email: text('email'),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
});

export const billingCheckoutSessions = pgTable(
  'billing_checkout_sessions',
  {
    id: text('id').primaryKey(),
    orgKey: text('org_key').notNull(),
    customerId: text('customer_id').notNull(),
    kind: text('kind', { enum: ['topup', 'subscription'] }).notNull(),
    /** Tokens a top-up grants (amount_usd cents × 10: 1,000 tokens per currency unit). */
    credits: bigint('credits', { mode: 'number' }).notNull().default(0),
    amountCents: integer('amount_cents').notNull().default(0),
    status: text('status').notNull().default('open'),
    successUrl: text('success_url').notNull(),
    cancelUrl: text('cancel_url').notNull(),
    createdBy: text('created_by').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('billing_checkout_sessions_org_idx').on(t.orgKey)],
);

export const billingSubscriptions = pgTable(
  'billing_subscriptions',
  {
    id: text('id').primaryKey(), // processor's subscription id
    orgKey: text('org_key').notNull(),
    customerId: text('customer_id').notNull(),
    planName: text('plan_name').notNull().default('pro'),
    status: text('status').notNull(),
    currentPeriodStart: bigint('current_period_start', { mode: 'number' }),
    currentPeriodEnd: bigint('current_period_end', { mode: 'number' }),
    cancelAtPeriodEnd: boolean('cancel_at_period_end').notNull().default(false),
    /** `created` of the newest event applied: an older event delivered late never overwrites it. */
    eventCreated: bigint('event_created', { mode: 'number' }).notNull().default(0),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('billing_subscriptions_org_idx').on(t.orgKey)],
);

export const billingInvoices = pgTable(
  'billing_invoices',
  {
    id: text('id').primaryKey(),
    orgKey: text('org_key').notNull(),
    customerId: text('customer_id').notNull(),
    subscriptionId: text('subscription_id'),
    billingReason: text('billing_reason'),
    amountDueCents: integer('amount_due_cents').notNull(),
    amountPaidCents: integer('amount_paid_cents').notNull(),
    status: text('status').notNull(),
    currency: text('currency').notNull(),
    invoicePdf: text('invoice_pdf'),
    createdAtUnix: bigint('created_at_unix', { mode: 'number' }).notNull(),
    dueDate: bigint('due_date', { mode: 'number' }),
    /** The payment that paid it (pinned API: invoice.payments[].payment.payment_intent); refunds name it. */
    paymentIntent: text('payment_intent'),
    /** Set by invoice.payment_failed: the failure stays visible. */
    paymentFailedAt: timestamp('payment_failed_at', { withTimezone: true }),
    eventCreated: bigint('event_created', { mode: 'number' }).notNull().default(0),
  },
  // The invoice list's order (newest first, id breaking ties) so a page is read from the index, unsorted.
  (t) => [index('billing_invoices_org_idx').on(t.orgKey, t.createdAtUnix, t.id)],
);

/** Payment methods the dev processor recorded (with Stripe they are read from the API). */
export const billingPaymentMethods = pgTable('billing_payment_methods', {
  id: text('id').primaryKey(),
  customerId: text('customer_id').notNull(),
  brand: text('brand').notNull(),
  last4: text('last4').notNull(),
  expMonth: integer('exp_month').notNull(),
  expYear: integer('exp_year').notNull(),
  isDefault: boolean('is_default').notNull().default(true),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
});

/** Webhook events already applied: exactly once per event id, in the transaction of the effect. */
export const billingWebhookEvents = pgTable('billing_webhook_events', {
  id: text('id').primaryKey(),
  type: text('type').notNull(),
  outcome: text('outcome').notNull(),
  processedAt: timestamp('processed_at', { withTimezone: true }).notNull().defaultNow(),
});

/**
 * Payments that granted tokens, by the processor's payment intent (what a Refund names). A row is also
 * started by a refund that arrives before its payment's grant (grant_key still null): whichever of the
 * two comes second waits on this primary key for the first to commit, so neither misses the other.
 */
export const billingPayments = pgTable(
  'billing_payments',
  {
    paymentIntent: text('payment_intent').primaryKey(),
    /** The grant's ledger key (`grant:session:<id>` / `grant:invoice:<id>`); null until the grant is known. */
    grantKey: text('grant_key'),
    /** The invoice it paid, when known from invoice_payment.paid (invoice.paid omits `payments` unless expanded). */
    invoiceId: text('invoice_id'),
    /** The client the tokens were allocated to, and its owner (whose pool backs a refund). */
    orgKey: text('org_key'),
    ownerId: text('owner_id'),
    credits: bigint('credits', { mode: 'number' }).notNull().default(0),
    amountCents: bigint('amount_cents', { mode: 'number' }).notNull().default(0),
    /**
     * Money that left this payment so far (cents): refunds applied plus disputes withdrawn and not
     * reinstated; and the tokens those took back (client + pool + shortfall). Cumulative rounding
     * (payment-reversals.ts) reads both.
     */
    refundedCents: bigint('refunded_cents', { mode: 'number' }).notNull().default(0),
    refundedCredits: bigint('refunded_credits', { mode: 'number' }).notNull().default(0),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('billing_payments_invoice_idx').on(t.invoiceId)],
);

export const REFUND_STATUSES = ['awaiting_payment', 'applied', 'failed'] as const;

/** One row per processor refund: applied exactly once (ledger keys `refund:<id>`, `refund:<id>:pool`). */
export const billingRefunds = pgTable(
  'billing_refunds',
  {
    id: text('id').primaryKey(), // processor's refund id (re_…)
    paymentIntent: text('payment_intent').notNull(),
    amountCents: bigint('amount_cents', { mode: 'number' }).notNull(),
    status: text('status', { enum: REFUND_STATUSES }).notNull(),
    /** Tokens to claw back (proportional share of the grant), and where they came from. */
    credits: bigint('credits', { mode: 'number' }).notNull().default(0),
    fromClient: bigint('from_client', { mode: 'number' }).notNull().default(0),
    fromPool: bigint('from_pool', { mode: 'number' }).notNull().default(0),
    /** Tokens already spent that could not be taken back (a balance never goes below zero). */
    shortfall: bigint('shortfall', { mode: 'number' }).notNull().default(0),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    appliedAt: timestamp('applied_at', { withTimezone: true }),
  },
  (t) => [
    check('billing_refunds_split', sql`${t.credits} = ${t.fromClient} + ${t.fromPool} + ${t.shortfall}`),
    index('billing_refunds_payment_idx').on(t.paymentIntent),
  ],
);

/**
 * Dispute lifecycle as far as tokens go (disputes.ts): `open` (known, nothing taken: an inquiry or a
 * chargeback whose funds have not left yet), `awaiting_payment` (funds withdrawn before the payment's
 * grant arrived), `withdrawn` (tokens taken back), `reinstated` (given back after a win), `kept`
 * (closed in our favour before anything was taken). Each arrow is taken at most once.
 */
export const DISPUTE_STATES = ['open', 'awaiting_payment', 'withdrawn', 'reinstated', 'kept'] as const;

/**
 * One row per processor dispute (du_…): its withdrawal takes back tokens exactly once (ledger keys
 * `dispute:<id>`, `dispute:<id>:pool`) and its reinstatement gives back exactly that once
 * (`dispute:<id>:reinstated`, `dispute:<id>:reinstated:pool`).
 */
export const billingDisputes = pgTable(
  'billing_disputes',
  {
    id: text('id').primaryKey(),
    paymentIntent: text('payment_intent').notNull(),
    chargeId: text('charge_id'),
    /** The disputed amount (Dispute.amount) as of the withdrawal, or as last seen before it. */
    amountCents: bigint('amount_cents', { mode: 'number' }).notNull(),
    /** The processor's status in the newest event seen (informational: the state column decides). */
    processorStatus: text('processor_status').notNull(),
    statusEventCreated: bigint('status_event_created', { mode: 'number' }).notNull().default(0),
    state: text('state', { enum: DISPUTE_STATES }).notNull(),
    /** What the withdrawal took back (proportional share of the grant) and from where. */
    credits: bigint('credits', { mode: 'number' }).notNull().default(0),
    fromClient: bigint('from_client', { mode: 'number' }).notNull().default(0),
    fromPool: bigint('from_pool', { mode: 'number' }).notNull().default(0),
    shortfall: bigint('shortfall', { mode: 'number' }).notNull().default(0),
    /** Cents the withdrawal added to the payment's refunded_cents (capped at what was left); undone on reinstatement. */
    reversedCents: bigint('reversed_cents', { mode: 'number' }).notNull().default(0),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    withdrawnAt: timestamp('withdrawn_at', { withTimezone: true }),
    reinstatedAt: timestamp('reinstated_at', { withTimezone: true }),
  },
  (t) => [
    check('billing_disputes_split', sql`${t.credits} = ${t.fromClient} + ${t.fromPool} + ${t.shortfall}`),
    index('billing_disputes_payment_idx').on(t.paymentIntent),
  ],
);
