import { sql, type SQL } from 'drizzle-orm';
import { index, pgTable, text, timestamp, type AnyPgColumn } from 'drizzle-orm/pg-core';
import { users } from './accounts.js';
import { orgs } from './orgs.js';

// Service accounts (CONTRACT §11): an organization's non-person principals. Each is backed by a users row
// of the same id (`sa_…`) and a membership with its role, so that every rule that reads a credential's
// holder — the live membership, the role, budgets, usage, the one-active-credential index — applies to it
// unchanged (docs/decisions/0053-credentials-for-machines-and-their-limits.md). The backing row has no password and an
// address under `.invalid` (RFC 6761): it can never sign in.

export const serviceAccounts = pgTable(
  'service_accounts',
  {
    /** sa_…, also the backing users row's id. */
    id: text('id')
      .primaryKey()
      .references(() => users.id),
    orgId: text('org_id')
      .notNull()
      .references(() => orgs.id),
    name: text('name').notNull(),
    createdBy: text('created_by')
      .notNull()
      .references(() => users.id),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    deletedAt: timestamp('deleted_at', { withTimezone: true }),
  },
  (t) => [index('service_accounts_org_idx').on(t.orgId, t.createdAt)],
);

/**
 * A user id that is a person, not a service account: lookups by e-mail (sign-in, reset, adding a member,
 * sharing) and the member list never find a service account's backing row.
 */
export const isPersonId = (column: AnyPgColumn): SQL => sql`${column} not like 'sa\\_%'`;
