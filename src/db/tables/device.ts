import { boolean, index, integer, pgTable, serial, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { users } from './accounts.js';
import { orgs } from './orgs.js';

// Device authorizations (RFC 8628; CONTRACT §6). One store serves the terminal device flow and the
// OAuth device grant (§7). Both codes are stored as HMAC-SHA-256 only (CONTRACT §4 "every secret at rest").

export const DEVICE_FLOWS = ['terminal', 'oauth'] as const;
export type DeviceFlow = (typeof DEVICE_FLOWS)[number];

export const DEVICE_STATUSES = ['pending', 'approved', 'denied'] as const;
export type DeviceStatus = (typeof DEVICE_STATUSES)[number];

export const deviceCodes = pgTable(
  'device_codes',
  {
    id: serial('id').primaryKey(),
    deviceCodeHash: text('device_code_hash').notNull(),
    /** HMAC of the normalised user code (8 letters, no hyphen, upper case). */
    userCodeHash: text('user_code_hash').notNull(),
    flow: text('flow', { enum: DEVICE_FLOWS }).notNull(),
    /** OAuth device grant only: the requesting client, the resources named and the scope asked for. */
    oauthClientId: text('oauth_client_id'),
    resources: text('resources').array(),
    scope: text('scope'),
    /**
     * OAuth device grant only: the origin (issuer) that issued the code. Like an authorization code, it
     * is redeemable only there, for that origin's resource URLs (CONTRACT §7).
     */
    issuer: text('issuer'),
    /** OAuth device grant only: "all my organizations" was ticked at approval (oauthGrants.allOrgs). */
    allOrgs: boolean('all_orgs').notNull().default(false),
    status: text('status', { enum: DEVICE_STATUSES }).notNull().default('pending'),
    /** Who approved or denied, and for which organization (approval only). */
    userId: text('user_id').references(() => users.id),
    orgId: text('org_id').references(() => orgs.id),
    /** Minimum seconds between polls; raised by 5 on each slow_down (RFC 8628 §3.5). */
    intervalSeconds: integer('interval_seconds').notNull(),
    lastPolledAt: timestamp('last_polled_at', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    decidedAt: timestamp('decided_at', { withTimezone: true }),
    /** Set by the one guarded UPDATE that hands the approval out (exactly once). */
    consumedAt: timestamp('consumed_at', { withTimezone: true }),
  },
  (t) => [
    uniqueIndex('device_codes_device_code_idx').on(t.deviceCodeHash),
    // A user code names one authorization; a collision on insert is retried with a fresh code.
    uniqueIndex('device_codes_user_code_idx').on(t.userCodeHash),
    // The purge of long-expired rows (store.ts) walks this index.
    index('device_codes_expires_idx').on(t.expiresAt),
  ],
);
