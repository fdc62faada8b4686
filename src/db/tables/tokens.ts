import { sql } from 'drizzle-orm';
import { index, integer, pgTable, serial, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { users } from './accounts.js';
import { orgs } from './orgs.js';

// Durable svc_… credentials (interface document: API token; CONTRACT §6). Only the HMAC is stored.

export const apiTokens = pgTable(
  'api_tokens',
  {
    id: serial('id').primaryKey(),
    userId: text('user_id')
      .notNull()
      .references(() => users.id),
    orgId: text('org_id')
      .notNull()
      .references(() => orgs.id),
    tokenName: text('token_name').notNull(),
    tokenHash: text('token_hash').notNull(),
    /** First characters of the secret, enough for a person to recognise it in a list. */
    tokenPrefix: text('token_prefix').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    lastUsedAt: timestamp('last_used_at', { withTimezone: true }),
    revokedAt: timestamp('revoked_at', { withTimezone: true }),
    /** After it the credential answers like a revoked one (CONTRACT §6 "Credential options"); null = never. */
    expiresAt: timestamp('expires_at', { withTimezone: true }),
    /**
     * When svc's expiry sweep saw `expiresAt` pass (src/audit/token-expiry.ts): its `token.expired` audit
     * event was written then, once, if the credential was still active at its expiry. Null: not yet.
     */
    expirySeenAt: timestamp('expiry_seen_at', { withTimezone: true }),
    /** Which routes it reaches: `model`, `account` (CONTRACT §6); set at mint, never changed. */
    scopes: text('scopes')
      .array()
      .notNull()
      .default(sql`'{model,account}'::text[]`),
    /** Its own rate limits (CONTRACT §11 "Rate limits"); null = none. */
    rpmLimit: integer('rpm_limit'),
    tpmLimit: integer('tpm_limit'),
  },
  (t) => [
    uniqueIndex('api_tokens_hash_idx').on(t.tokenHash),
    // "Each (organization, principal) pair has one active credential" — enforced by the database.
    uniqueIndex('api_tokens_one_active_per_org_user')
      .on(t.orgId, t.userId)
      .where(sql`${t.revokedAt} is null`),
    // The caller's token list in its order (active first, then newest: tokens/service.ts listOwnTokens),
    // so a page is read from the index without a sort; also every lookup by user.
    // A service account's credential in its organization's list (src/service-accounts).
    index('api_tokens_org_idx').on(t.orgId, t.userId),
    // The credentials whose expiry the sweep has still to see, in the order they expire (a handful at most).
    index('api_tokens_expiry_due_idx')
      .on(t.expiresAt)
      .where(sql`${t.expiresAt} is not null and ${t.expirySeenAt} is null`),
    index('api_tokens_user_idx').on(t.userId, sql`(${t.revokedAt} is not null)`, t.id.desc().nullsFirst()),
  ],
);
