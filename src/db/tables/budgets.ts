import { sql } from 'drizzle-orm';
import {
  bigint,
  bigserial,
  check,
  index,
  integer,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
} from 'drizzle-orm/pg-core';

// Member budgets (docs/billing.md, "Member budgets"): the owner gives a member, or one of
// the member's `svc_` tokens, at most `limit_credits` tokens of the organization's allocation per period
// (a UTC day, ISO week or month). Enforced by the hold itself (svc_reserve_budgeted,
// src/db/custom/member-budgets.sql): a hold counts against the budget when it is taken, and its settle
// gives back what it did not debit.

export const BUDGET_PERIODS = ['day', 'week', 'month'] as const;
export type BudgetPeriod = (typeof BUDGET_PERIODS)[number];

/**
 * One budget per member (api_token_id null) and one per token. A cleared budget keeps its row with
 * `cleared_at` set: its periods' counts stay, so clearing and setting again within a period does not
 * give the member a fresh budget, and holds in flight still find the row they count against.
 */
export const memberBudgets = pgTable(
  'member_budgets',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    orgKey: text('org_key').notNull(),
    userId: text('user_id').notNull(),
    /** Set: the budget of this `svc_` token of the member, on top of the member's own. */
    apiTokenId: integer('api_token_id'),
    period: text('period', { enum: BUDGET_PERIODS }).notNull(),
    limitCredits: bigint('limit_credits', { mode: 'number' }).notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
    clearedAt: timestamp('cleared_at', { withTimezone: true }),
  },
  (t) => [
    check('member_budgets_limit', sql`${t.limitCredits} >= 0`),
    uniqueIndex('member_budgets_member_uq')
      .on(t.orgKey, t.userId)
      .where(sql`${t.apiTokenId} is null`),
    uniqueIndex('member_budgets_token_uq')
      .on(t.apiTokenId)
      .where(sql`${t.apiTokenId} is not null`),
    // Every hold asks whether its org has budgets at all (svc_reserve_budgeted's fast path).
    index('member_budgets_org_idx').on(t.orgKey),
  ],
);

/**
 * What one budget has used in one period: the tokens held by its calls in flight plus what its settled
 * calls debited. A period is its start (UTC); the first hold of a new period starts a new row, which is
 * the reset.
 */
export const memberBudgetUsage = pgTable(
  'member_budget_usage',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    budgetId: bigint('budget_id', { mode: 'number' }).notNull(),
    periodStart: timestamp('period_start', { withTimezone: true }).notNull(),
    used: bigint('used', { mode: 'number' }).notNull().default(0),
    /** When a call was first refused for this period (member_budget.exhausted is sent once per period). */
    exhaustedAt: timestamp('exhausted_at', { withTimezone: true }),
  },
  (t) => [
    uniqueIndex('member_budget_usage_period_uq').on(t.budgetId, t.periodStart),
    check('member_budget_usage_used', sql`${t.used} >= 0`),
  ],
);

/** Which period rows a live hold counts against (one or two: the member's budget and the token's). */
export const memberBudgetHolds = pgTable(
  'member_budget_holds',
  {
    requestId: text('request_id').notNull(),
    usageId: bigint('usage_id', { mode: 'number' }).notNull(),
  },
  (t) => [primaryKey({ columns: [t.requestId, t.usageId] })],
);

/**
 * Tokens a settle gave back to a period (the hold minus the debit), folded into `used` by the next hold
 * that counts against that period. A settle only appends here, so it never waits for a budget's row
 * (lock order: src/db/custom/member-budgets.sql).
 */
export const memberBudgetReturns = pgTable(
  'member_budget_returns',
  {
    id: bigserial('id', { mode: 'number' }).primaryKey(),
    usageId: bigint('usage_id', { mode: 'number' }).notNull(),
    amount: bigint('amount', { mode: 'number' }).notNull(),
  },
  (t) => [index('member_budget_returns_usage_idx').on(t.usageId)],
);
