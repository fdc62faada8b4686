import { sql } from 'drizzle-orm';
import { index, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { users } from './accounts.js';
import { orgs, ROLES } from './orgs.js';

// Invitations to an organization by e-mail (docs/orgs-tokens-device.md "Invitations").
// The secret of the link is stored as its HMAC only (STYLE: secrets at rest are hashes). An invitation
// is open until it is accepted, revoked or past expires_at; at most one open invitation per organization
// and address, held by the database (a new one for the same address replaces the old one).

export const orgInvitations = pgTable(
  'org_invitations',
  {
    /** Public handle `inv_…` (lists, revocation); never the secret. */
    id: text('id').primaryKey(),
    orgId: text('org_id')
      .notNull()
      .references(() => orgs.id),
    /** Normalised (trimmed, lower-case) like every account e-mail. */
    email: text('email').notNull(),
    role: text('role', { enum: ROLES }).notNull(),
    tokenHash: text('token_hash').notNull(),
    invitedBy: text('invited_by')
      .notNull()
      .references(() => users.id),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    acceptedAt: timestamp('accepted_at', { withTimezone: true }),
    acceptedBy: text('accepted_by').references(() => users.id),
    revokedAt: timestamp('revoked_at', { withTimezone: true }),
  },
  (t) => [
    uniqueIndex('org_invitations_token_idx').on(t.tokenHash),
    uniqueIndex('org_invitations_one_open_per_email')
      .on(t.orgId, t.email)
      .where(sql`${t.acceptedAt} is null and ${t.revokedAt} is null`),
    // The list's order, newest first with the id breaking ties (orgs/invitations.ts listInvitations):
    // a page, at any offset or cursor, is one walk of this index.
    index('org_invitations_org_idx').on(t.orgId, t.createdAt, t.id),
  ],
);
