import { sql } from 'drizzle-orm';
import { index, integer, jsonb, pgTable, serial, text, timestamp, unique } from 'drizzle-orm/pg-core';

// Outbound events (src/events/): endpoints an owner registers per organization, the
// events svc emits (the durable outbox, written in the transaction of what they report), and one delivery
// per event and subscribed endpoint, retried with backoff until the receiver answers 2xx.

export const webhookEndpoints = pgTable(
  'webhook_endpoints',
  {
    /** `we_…` */
    id: text('id').primaryKey(),
    orgKey: text('org_key').notNull(),
    url: text('url').notNull(),
    /** The event types delivered to it. */
    events: text('events').array().notNull(),
    /** The signing secret, sealed with the server's encryption key (src/crypto/hash.ts encrypt): svc signs with it. */
    secretSealed: text('secret_sealed').notNull(),
    /**
     * The billing page shows a new endpoint's secret once, on the GET after its POST (POST/redirect/GET):
     * the page session (ses_…) that created it may redeem this once, until `reveal_until`, with one guarded
     * UPDATE that clears it. Null for endpoints made through the API (its answer carries the secret).
     */
    revealSession: text('reveal_session'),
    revealUntil: timestamp('reveal_until', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('webhook_endpoints_org_idx').on(t.orgKey, t.createdAt)],
);

export const outboundEvents = pgTable(
  'outbound_events',
  {
    /** `evt_…`: the same on every delivery and retry, for receivers to deduplicate. */
    id: text('id').primaryKey(),
    orgKey: text('org_key').notNull(),
    type: text('type').notNull(),
    /** The event's `data` object. */
    data: jsonb('data').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('outbound_events_org_idx').on(t.orgKey, t.createdAt)],
);

export const DELIVERY_STATUSES = ['pending', 'delivered', 'failed'] as const;

export const webhookDeliveries = pgTable(
  'webhook_deliveries',
  {
    /** The delivery log's id (an integer, like transactions). */
    id: serial('id').primaryKey(),
    eventId: text('event_id')
      .notNull()
      .references(() => outboundEvents.id),
    endpointId: text('endpoint_id')
      .notNull()
      .references(() => webhookEndpoints.id, { onDelete: 'cascade' }),
    status: text('status', { enum: DELIVERY_STATUSES }).notNull().default('pending'),
    attempts: integer('attempts').notNull().default(0),
    /** When a pending delivery is due; while an attempt runs, when its claim lapses. */
    nextAttemptAt: timestamp('next_attempt_at', { withTimezone: true }).notNull().defaultNow(),
    lastAttemptAt: timestamp('last_attempt_at', { withTimezone: true }),
    /** The receiver's HTTP status of the last attempt (null: no answer). */
    lastStatus: integer('last_status'),
    /** Why the last attempt failed, in a few words (never the receiver's body). */
    lastError: text('last_error'),
    deliveredAt: timestamp('delivered_at', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    unique('webhook_deliveries_event_endpoint').on(t.eventId, t.endpointId),
    // What the delivery workers claim: pending deliveries by due time.
    index('webhook_deliveries_due_idx')
      .on(t.nextAttemptAt)
      .where(sql`${t.status} = 'pending'`),
    // An endpoint's delivery log, newest first.
    index('webhook_deliveries_endpoint_idx').on(t.endpointId, sql`(-${t.id})`),
  ],
);
