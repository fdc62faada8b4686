import { sql } from 'drizzle-orm';
import {
  boolean,
  index,
  integer,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
} from 'drizzle-orm/pg-core';
import { users } from './accounts.js';

// Organizations ("clients") and who belongs to them (interface document: Client; CONTRACT §5).

export const orgs = pgTable(
  'orgs',
  {
    /** The <x> of client_<x> / org_<x> (CONTRACT §2). */
    id: text('id').primaryKey(),
    name: text('name').notNull(),
    ownerId: text('owner_id')
      .notNull()
      .references(() => users.id),
    isDefault: boolean('is_default').notNull().default(false),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    deletedAt: timestamp('deleted_at', { withTimezone: true }),
    /** The organization's rate limits (CONTRACT §11 "Rate limits"); null = none. */
    rpmLimit: integer('rpm_limit'),
    tpmLimit: integer('tpm_limit'),
  },
  (t) => [
    // One default client per account.
    uniqueIndex('orgs_one_default_per_owner')
      .on(t.ownerId)
      .where(sql`${t.isDefault}`),
    index('orgs_owner_idx').on(t.ownerId),
  ],
);

export const ROLES = ['owner', 'member', 'viewer'] as const;
export type Role = (typeof ROLES)[number];

export const memberships = pgTable(
  'memberships',
  {
    orgId: text('org_id')
      .notNull()
      .references(() => orgs.id),
    userId: text('user_id')
      .notNull()
      .references(() => users.id),
    role: text('role', { enum: ROLES }).notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.orgId, t.userId] }),
    index('memberships_user_idx').on(t.userId),
    // The member list's order (oldest first, user id breaking ties: orgs/service.ts listMembers).
    index('memberships_org_time_idx').on(t.orgId, t.createdAt, t.userId),
  ],
);
