import { sql } from 'drizzle-orm';
import { bigint, bigserial, index, pgTable, primaryKey, text, timestamp } from 'drizzle-orm/pg-core';

// Balance crossings (src/billing/balance-crossings.ts): "the balance of org X went
// from ≥ T to < T". A watch names a threshold T of one org for one purpose (the low-balance alert, the
// exhausted alert, auto top-up); the database records every crossing of a watched threshold inside the
// transaction that moved the balance (the trigger in src/db/custom/balance-crossings.sql), so a crossing is
// recorded exactly once however many calls and processes settle together, and again after a top-up lifted
// the balance back to T or above.

export const balanceWatches = pgTable(
  'balance_watches',
  {
    orgKey: text('org_key').notNull(),
    /** Who watches: 'alert.low', 'alert.exhausted', 'auto_topup', … (a consumer's own name). */
    purpose: text('purpose').notNull(),
    /** Tokens: a crossing is the org balance going from ≥ threshold to < threshold. */
    threshold: bigint('threshold', { mode: 'number' }).notNull(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.orgKey, t.purpose] })],
);

/**
 * The durable outbox of crossings: written by the trigger in the balance's own transaction, handled by the
 * purpose's consumer (handleCrossings), which sets handled_at in the transaction of its own effect.
 */
export const balanceCrossings = pgTable(
  'balance_crossings',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    orgKey: text('org_key').notNull(),
    purpose: text('purpose').notNull(),
    threshold: bigint('threshold', { mode: 'number' }).notNull(),
    balanceBefore: bigint('balance_before', { mode: 'number' }).notNull(),
    balanceAfter: bigint('balance_after', { mode: 'number' }).notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    handledAt: timestamp('handled_at', { withTimezone: true }),
  },
  (t) => [
    // What a consumer claims: its purpose's unhandled crossings, oldest first.
    index('balance_crossings_pending_idx')
      .on(t.purpose, t.id)
      .where(sql`${t.handledAt} is null`),
    index('balance_crossings_org_idx').on(t.orgKey, t.id),
  ],
);
