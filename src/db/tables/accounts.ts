import { sql } from 'drizzle-orm';
import {
  bigint,
  index,
  integer,
  pgTable,
  serial,
  text,
  timestamp,
  uniqueIndex,
  varchar,
} from 'drizzle-orm/pg-core';

// People and their sign-in state. Every secret here is a hash or ciphertext (CONTRACT §4).

export const users = pgTable('users', {
  id: text('id').primaryKey(), // usr_…
  email: text('email').notNull().unique(), // trimmed, lower-cased
  name: text('name').notNull(),
  passwordHash: text('password_hash').notNull(),
  emailVerifiedAt: timestamp('email_verified_at', { withTimezone: true }),
  /** TOTP secret, AES-256-GCM encrypted with a server key (it must be read back to check codes). */
  totpSecretEnc: text('totp_secret_enc'),
  totpEnabledAt: timestamp('totp_enabled_at', { withTimezone: true }),
  /** Last TOTP time step accepted: a step already used is refused (CONTRACT §4, no replay). */
  totpLastStep: bigint('totp_last_step', { mode: 'number' }),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  /**
   * Set when the person deleted their account (src/accounts/account-deletion.ts): the row stays,
   * anonymised, because the append-only ledger and the usage records name it.
   */
  deletedAt: timestamp('deleted_at', { withTimezone: true }),
});

export const sessions = pgTable(
  'sessions',
  {
    /**
     * ses_…: the session's public handle, not a secret. The portal lists and revokes sessions by it
     * (docs/accounts.md "Sessions"); knowing it signs nobody in.
     */
    id: text('id').primaryKey(),
    /**
     * SHA-256 of the JWT's secret `sid` claim: a copy of the database, even with the
     * session key, cannot name a live session, because the sid itself is stored nowhere.
     */
    secretHash: text('secret_hash').notNull().unique(),
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    revokedAt: timestamp('revoked_at', { withTimezone: true }),
  },
  (t) => [
    index('sessions_user_live_idx')
      .on(t.userId)
      .where(sql`${t.revokedAt} is null`),
  ],
);

/**
 * Single-use e-mail tokens (CONTRACT §4): e-mail verification (24 h) and password reset (1 h). Only the
 * HMAC of the token is stored; redemption is one guarded UPDATE … WHERE used_at IS NULL (STYLE).
 */
export const accountTokens = pgTable(
  'account_tokens',
  {
    id: serial('id').primaryKey(),
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    purpose: text('purpose', { enum: ['verify_email', 'reset_password'] }).notNull(),
    tokenHash: text('token_hash').notNull().unique(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    usedAt: timestamp('used_at', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('account_tokens_user_idx').on(t.userId, t.purpose)],
);

/** One-time 2FA recovery codes (interface document: Limits, "each usable once"); HMAC only. */
export const recoveryCodes = pgTable(
  'recovery_codes',
  {
    id: serial('id').primaryKey(),
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    codeHash: text('code_hash').notNull(),
    usedAt: timestamp('used_at', { withTimezone: true }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [uniqueIndex('recovery_codes_user_code_idx').on(t.userId, t.codeHash)],
);

/**
 * The second step of a 2FA login (CONTRACT §4): 5 minutes, 5 wrong codes burn it. The attempt count
 * lives in the row so the rule holds whatever the rate-limit store.
 */
export const twoFactorChallenges = pgTable('two_factor_challenges', {
  id: serial('id').primaryKey(),
  tokenHash: text('token_hash').notNull().unique(),
  userId: text('user_id')
    .notNull()
    .references(() => users.id, { onDelete: 'cascade' }),
  failedAttempts: integer('failed_attempts').notNull().default(0),
  expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
  consumedAt: timestamp('consumed_at', { withTimezone: true }),
  createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
});

/**
 * The PostgreSQL store of rate-limiter-flexible (src/ratelimit), in the shape that library expects, so
 * it needs no DDL at run time and is shared by every process on the database (CONTRACT §1).
 * Keys are hashed before they get here (no e-mail addresses at rest).
 */
export const rateLimits = pgTable('rate_limits', {
  key: varchar('key', { length: 255 }).primaryKey(),
  points: integer('points').notNull().default(0),
  expire: bigint('expire', { mode: 'number' }),
});

/**
 * Mailboxes that have had their trial, once the account that had it is deleted (CONTRACT §8: once per
 * address). Only a keyed hash of the normalised address (src/accounts/trial-addresses.ts), never the
 * address: the table cannot be read back into a list of former users.
 */
export const usedTrialAddresses = pgTable('used_trial_addresses', {
  addressHash: text('address_hash').primaryKey(),
  recordedAt: timestamp('recorded_at', { withTimezone: true }).notNull().defaultNow(),
});
