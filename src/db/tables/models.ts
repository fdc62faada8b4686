import { index, pgTable, primaryKey, integer, text, timestamp } from 'drizzle-orm/pg-core';

// The per-organization concurrency cap (CONTRACT §9: at most ORG_MAX_CONCURRENCY model calls and runs in
// flight per organization, held across every process that shares the database).
//
// A cap of N is N numbered slots per org. Taking a slot is one guarded upsert on (org_id, slot): it
// inserts a free slot or takes over an expired one, and loses to a live holder — no locks, no counting
// races between processes. Holders extend `expires_at` by heartbeat; a killed process stops beating and
// its slots become free when they expire.
export const concurrencyLeases = pgTable(
  'concurrency_leases',
  {
    orgId: text('org_id').notNull(),
    slot: integer('slot').notNull(),
    /** Random id of this holding; release and heartbeat match it so a taken-over slot is never freed twice. */
    leaseId: text('lease_id').notNull(),
    /** 'chat' or 'run' (for operators reading the table). */
    kind: text('kind').notNull(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    acquiredAt: timestamp('acquired_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [primaryKey({ columns: [t.orgId, t.slot] }), index('concurrency_leases_lease_idx').on(t.leaseId)],
);
