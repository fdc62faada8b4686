import { sql } from 'drizzle-orm';
import { bigint, index, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

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
});

export const sessions = pgTable(
  'sessions',
  {
    id: text('id').primaryKey(), // ses_… — the `sid` claim of the session JWT
    userId: text('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    expiresAt: timestamp('expires_at', { withTimezone: true }).notNull(),
    revokedAt: timestamp('revoked_at', { withTimezone: true }),
  },
  (t) => [index('sessions_user_live_idx').on(t.userId).where(sql`${t.revokedAt} is null`)],
);

