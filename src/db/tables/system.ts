import { pgTable, serial, text, timestamp, index } from 'drizzle-orm/pg-core';

// Server state that is not anybody's data.

/** Secrets the operator did not set, generated on first start and kept here (CONTRACT §1). */
export const serverSecrets = pgTable('server_secrets', {
  name: text('name').primaryKey(),
  value: text('value').notNull(),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
});

/** The dev mail outbox (CONTRACT §4), written when no SMTP_URL is configured. */
export const mailOutbox = pgTable(
  'mail_outbox',
  {
    id: serial('id').primaryKey(),
    to: text('to').notNull(),
    subject: text('subject').notNull(),
    text: text('text').notNull(),
    html: text('html').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('mail_outbox_to_idx').on(t.to, t.createdAt)],
);

/**
 * Every svc process sharing the database, by the tag it stamps on what it takes (items 2 and
 * 5; src/models/slot/liveness.ts): its leases and holds belong to it while its heartbeat is fresh, and are
 * reclaimed within seconds once it is not.
 */
export const svcProcesses = pgTable('svc_processes', {
  tag: text('tag').primaryKey(),
  startedAt: timestamp('started_at', { withTimezone: true }).notNull().defaultNow(),
  beatAt: timestamp('beat_at', { withTimezone: true }).notNull().defaultNow(),
});
