import { bigint, index, jsonb, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';

// The audit log (CONTRACT §11; src/audit/): one immutable row per change of who may do what or spend what
// in an organization, and one per event of a person's own account. Each row is a link of a hash chain:
// the chain of its organization, or of its person for account events. No foreign keys: an event outlives
// the credential, member, client or account it names (src/db/custom/immutable-audit.sql refuses update
// and delete, as for the ledger).

export const auditEvents = pgTable(
  'audit_events',
  {
    /** `ae_…` */
    id: text('id').primaryKey(),
    /**
     * Whose chain the event is a link of: an organization's stored key (`<x>` of `client_<x>`) or a
     * person's user id (`usr_…`, the account log). The two never collide: an org key has no `_`.
     */
    chain: text('chain').notNull(),
    /** The event's place in its chain, 1 for the first: the keyset every listing pages on. */
    seq: bigint('seq', { mode: 'number' }).notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull(),
    action: text('action').notNull(),
    actorType: text('actor_type', { enum: ['user', 'service_account', 'system'] }).notNull(),
    actorId: text('actor_id'),
    actorEmail: text('actor_email'),
    credentialId: text('credential_id'),
    ip: text('ip'),
    userAgent: text('user_agent'),
    targetType: text('target_type').notNull(),
    targetId: text('target_id'),
    details: jsonb('details').notNull(),
    prevHash: text('prev_hash').notNull(),
    hash: text('hash').notNull(),
  },
  (t) => [
    // A chain has one event per place: two writers that read the same head cannot both append to it.
    uniqueIndex('audit_events_chain_seq_idx').on(t.chain, t.seq),
    // The filters of GET …/audit-events, each a keyset of its own so a page costs the same at any depth.
    index('audit_events_chain_action_idx').on(t.chain, t.action, t.seq),
    index('audit_events_chain_actor_idx').on(t.chain, t.actorId, t.seq),
    index('audit_events_chain_time_idx').on(t.chain, t.createdAt, t.seq),
  ],
);
