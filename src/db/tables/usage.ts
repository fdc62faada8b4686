import {
  bigint,
  bigserial,
  check,
  index,
  integer,
  numeric,
  pgTable,
  primaryKey,
  text,
  timestamp,
} from 'drizzle-orm/pg-core';
import { sql } from 'drizzle-orm';

// One row per billed model call (a chat completion, or one model call of a run): who spent what, on
// which credential and model (the usage API and the portal's usage page read it). The ledger
// stays the truth of the money: this row is written by the same statement that settles the call
// (svc_settle_holds, src/db/custom/model-path-functions.sql), so a settled call always has one and a
// call that never settled has none. Calls that cost 0 tokens have a row too (they have no ledger row).
export const USAGE_OUTCOMES = ['completed', 'estimated', 'aborted'] as const;
export const USAGE_SOURCES = ['chat', 'run'] as const;

export const usageRecords = pgTable(
  'usage_records',
  {
    /** Newest first, and a stable order for paging. */
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    /** The call's request id (req_…): also its hold's and its `usage` ledger row's key (usage:<id>). */
    requestId: text('request_id').notNull().unique(),
    orgKey: text('org_key').notNull(),
    /** The acting user. */
    userId: text('user_id').notNull(),
    /** The credential: an `svc_` token's id, or an OAuth model grant and the OAuth client it was issued to. */
    apiTokenId: bigint('api_token_id', { mode: 'number' }),
    oauthGrantId: text('oauth_grant_id'),
    oauthClientId: text('oauth_client_id'),
    source: text('source', { enum: USAGE_SOURCES }).notNull(),
    runId: text('run_id'),
    model: text('model').notNull(),
    promptTokens: integer('prompt_tokens').notNull(),
    completionTokens: integer('completion_tokens').notNull(),
    /** Of prompt_tokens, those the provider served from its cache, priced at MODEL_PRICE_CACHED_INPUT. */
    cachedPromptTokens: integer('cached_prompt_tokens').notNull().default(0),
    /**
     * The exact cost (CONTRACT §9: prompt × price_in / 1e6 + completion × price_out / 1e6, with the cached
     * prompt tokens at price_cached_in instead of price_in), unrounded.
     */
    costCents: numeric('cost_cents').notNull(),
    /** What the settle debited: the `usage` ledger row's amount (0: no ledger row). */
    creditsDebited: bigint('credits_debited', { mode: 'number' }).notNull(),
    durationMs: integer('duration_ms').notNull(),
    outcome: text('outcome', { enum: USAGE_OUTCOMES }).notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [
    index('usage_records_org_time_idx').on(t.orgKey, t.createdAt),
    // The call log's order as -id (usage/service.ts usageCalls): see billing_entries_org_shown_idx for why
    // the primary key must not be able to give that order.
    index('usage_records_org_id_idx').on(t.orgKey, sql`(-${t.id})`),
    // No check constraints beyond these: a row that broke one would fail its call's settle, and the
    // debit matters more than the record.
    check('usage_records_amounts', sql`${t.creditsDebited} >= 0`),
  ],
);

/**
 * The usage records summed per hour (UTC) and per member, credential and model: what the usage API's
 * totals read (src/usage/service.ts; docs/usage.md "The rollup"), so a period costs its hours, not its
 * calls. Kept by svc_record_usage (src/db/custom/usage-records.sql) in the statement that
 * writes the records, so the two commit together; reconciliation checks the two agree
 * (src/billing/invariants.ts "usage rollup differs from its usage records").
 */
export const usageRollup = pgTable(
  'usage_rollup',
  {
    orgKey: text('org_key').notNull(),
    /** The hour the calls were recorded in: date_trunc('hour', created_at, 'UTC'). */
    hour: timestamp('hour', { withTimezone: true }).notNull(),
    userId: text('user_id').notNull(),
    /** The usage API's credential key: `token:<id>` or `grant:<grant id>` (usage/service.ts). */
    credential: text('credential').notNull(),
    model: text('model').notNull(),
    /** For the credential's label: the token's id, or the OAuth client the grant was issued to. */
    apiTokenId: bigint('api_token_id', { mode: 'number' }),
    oauthClientId: text('oauth_client_id'),
    calls: bigint('calls', { mode: 'number' }).notNull(),
    promptTokens: bigint('prompt_tokens', { mode: 'number' }).notNull(),
    completionTokens: bigint('completion_tokens', { mode: 'number' }).notNull(),
    cachedPromptTokens: bigint('cached_prompt_tokens', { mode: 'number' }).notNull(),
    creditsDebited: bigint('credits_debited', { mode: 'number' }).notNull(),
    costCents: numeric('cost_cents').notNull(),
  },
  // A period's rows of one client are one range of this key (org, hour, …).
  (t) => [
    primaryKey({ name: 'usage_rollup_pkey', columns: [t.orgKey, t.hour, t.userId, t.credential, t.model] }),
    // One credential's hours (GET /v1/auth/verify's `spend`: src/tokens/service.ts credentialSpend); a
    // credential names one organization's token or grant, so it leads, and a read of a client's period
    // (org, hour) has no use for this index and keeps the primary key. Written when a credential's hour
    // gets its first row; a settle then updates the row, not this key.
    index('usage_rollup_credential_idx').on(t.credential, t.hour),
  ],
);
