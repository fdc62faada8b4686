import { sql, type SQL } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { unknownCursor, type Page } from '../http/pagination.js';
import { planPeriod, signedRows } from './rollup.js';

// Reading usage records (src/db/tables/usage.ts) for the usage API and the portal's usage page. The
// records and their hourly rollup are written by the settles; the totals read the rollup (rollup.ts),
// the call log one client's records newest first.

export const USAGE_GROUPS = ['day', 'member', 'credential', 'model'] as const;
export type UsageGroup = (typeof USAGE_GROUPS)[number];

export interface UsagePeriod {
  orgKey: string;
  /** Unix seconds, inclusive. */
  from: number;
  /** Unix seconds, exclusive. */
  to: number;
}

export interface UsageTotals {
  calls: number;
  prompt_tokens: number;
  completion_tokens: number;
  /** Of prompt_tokens, those the provider served from its cache (priced at MODEL_PRICE_CACHED_INPUT). */
  cached_prompt_tokens: number;
  credits_debited: number;
  /** Exact decimal (CONTRACT §9's formula, unrounded), as a string: a float would round it. */
  cost_cents: string;
}

export interface UsageGroupRow extends UsageTotals {
  /** day: YYYY-MM-DD (UTC); member: user id; credential: token:<id> or grant:<grant id>; model: its id. */
  key: string;
  /** Words for the key: the member's e-mail, the token's name or the OAuth client's name. */
  label: string;
}

interface TotalsRow {
  key?: string;
  label?: string | null;
  calls: unknown;
  prompt_tokens: unknown;
  completion_tokens: unknown;
  cached_prompt_tokens: unknown;
  credits_debited: unknown;
  cost_cents: string | null;
}

const sums = sql`coalesce(sum(x.calls), 0) as calls, coalesce(sum(x.prompt_tokens), 0) as prompt_tokens,
  coalesce(sum(x.completion_tokens), 0) as completion_tokens,
  coalesce(sum(x.cached_prompt_tokens), 0) as cached_prompt_tokens, coalesce(sum(x.credits_debited), 0) as credits_debited,
  coalesce(trim_scale(sum(x.cost_cents)), 0)::text as cost_cents`;

const inPeriod = (p: UsagePeriod) =>
  sql`u.org_key = ${p.orgKey} and u.created_at >= to_timestamp(${p.from}) and u.created_at < to_timestamp(${p.to})`;

const totalsOf = (r: TotalsRow): UsageTotals => ({
  calls: Number(r.calls),
  prompt_tokens: Number(r.prompt_tokens),
  completion_tokens: Number(r.completion_tokens),
  cached_prompt_tokens: Number(r.cached_prompt_tokens),
  credits_debited: Number(r.credits_debited),
  cost_cents: r.cost_cents ?? '0',
});

/**
 * The key of each way of grouping, over the period's signed rows `x` (rollup.ts signedRows); and its
 * label, looked up by key for each grouped row `g` (a few rows), never joined before grouping (which
 * planned as a scan of every user at a million users).
 */
const GROUPING: Record<UsageGroup, { key: SQL; label: SQL }> = {
  day: { key: sql`to_char(x.hour at time zone 'UTC', 'YYYY-MM-DD')`, label: sql`g.key` },
  member: {
    key: sql`x.user_id`,
    label: sql`coalesce((select us.email from users us where us.id = g.key), g.key)`,
  },
  credential: {
    key: sql`x.credential`,
    label: sql`case when g.api_token_id is not null
        then 'API token ' || coalesce((select t.token_name from api_tokens t where t.id = g.api_token_id), '#' || g.api_token_id)
      else 'App ' || coalesce((select c.client_name from oauth_clients c where c.client_id = g.oauth_client_id),
                              g.oauth_client_id, substr(g.key, 7)) end`,
  },
  model: { key: sql`x.model`, label: sql`g.key` },
};

/**
 * Totals per group in the period (ordered by key), and over all of it: one statement over the rollup's
 * whole hours and the records of the partial hours at its ends (rollup.ts), grouped both ways at once
 * (GROUPING SETS), so groups and totals come from one snapshot. A group whose rows cancel out (its calls
 * all lay outside the period, in a partial hour read as the hour minus its outside) has no calls and is
 * not listed.
 */
export async function usageSummary(
  db: Db,
  period: UsagePeriod,
  groupBy: UsageGroup,
): Promise<{ data: UsageGroupRow[]; totals: UsageTotals }> {
  const g = GROUPING[groupBy];
  const rows = await queryRows<TotalsRow & { total: unknown }>(
    db,
    sql`select g.key, ${g.label} as label, g.total, g.calls, g.prompt_tokens, g.completion_tokens,
          g.cached_prompt_tokens, g.credits_debited, g.cost_cents
        from (select ${g.key} as key, grouping(${g.key}) as total, max(x.api_token_id) as api_token_id,
                max(x.oauth_client_id) as oauth_client_id, ${sums}
              from (${signedRows(period.orgKey, planPeriod(period.from, period.to))}) x
              group by grouping sets ((${g.key}), ())
              having sum(x.calls) <> 0 or grouping(${g.key}) = 1) g
        order by g.key`,
  );
  const groups = rows.filter((r) => Number(r.total) === 0);
  const all = rows.find((r) => Number(r.total) === 1);
  return {
    data: groups.map((r) => ({ key: String(r.key), label: String(r.label ?? r.key), ...totalsOf(r) })),
    totals: totalsOf(
      all ?? {
        calls: 0,
        prompt_tokens: 0,
        completion_tokens: 0,
        cached_prompt_tokens: 0,
        credits_debited: 0,
        cost_cents: '0',
      },
    ),
  };
}

export interface UsageCall {
  id: string;
  created_at: number;
  user_id: string;
  email: string | null;
  credential:
    | { type: 'api_token'; token_id: number; token_name: string | null }
    | { type: 'oauth_grant'; grant_id: string; client_id: string | null; client_name: string | null };
  source: string;
  run_id: string | null;
  model: string;
  prompt_tokens: number;
  completion_tokens: number;
  cached_prompt_tokens: number;
  cost_cents: string;
  credits_debited: number;
  duration_ms: number;
  outcome: string;
}

interface CallRow {
  request_id: string;
  created_at: string | Date;
  user_id: string;
  email: string | null;
  api_token_id: unknown;
  token_name: string | null;
  oauth_grant_id: string | null;
  oauth_client_id: string | null;
  client_name: string | null;
  source: string;
  run_id: string | null;
  model: string;
  prompt_tokens: unknown;
  completion_tokens: unknown;
  cached_prompt_tokens: unknown;
  cost_cents: string;
  credits_debited: unknown;
  duration_ms: unknown;
  outcome: string;
}

/**
 * The period's calls, newest first (-id: usage_records_org_id_idx's order, never the primary key's:
 * docs/scale.md), from the organization's newest call or from `startingAfter` (a call's request id here: CONTRACT §3).
 */
export async function usageCalls(db: Db, period: UsagePeriod, page: Page): Promise<UsageCall[]> {
  let after = sql``;
  if (page.startingAfter !== undefined) {
    const [c] = await queryRows<{ id: unknown }>(
      db,
      sql`select id from usage_records where request_id = ${page.startingAfter} and org_key = ${period.orgKey}`,
    );
    if (!c) throw unknownCursor();
    after = sql`and -u.id > ${-Number(c.id)}`;
  }
  // The labels (e-mail, token name, app name) as scalar subqueries by primary key, not joins: the same rows,
  // and PostgreSQL plans this in a third of the time (0.09 against 0.26 ms at 10M ledger rows), which was
  // most of what a page cost it (bench/README.md, scale).
  const rows = await queryRows<CallRow>(
    db,
    sql`select u.request_id, u.created_at, u.user_id, (select us.email from users us where us.id = u.user_id) as email,
          u.api_token_id, (select t.token_name from api_tokens t where t.id = u.api_token_id) as token_name,
          u.oauth_grant_id, u.oauth_client_id,
          (select c.client_name from oauth_clients c where c.client_id = u.oauth_client_id) as client_name,
          u.source, u.run_id, u.model, u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens,
          trim_scale(u.cost_cents)::text as cost_cents, u.credits_debited, u.duration_ms, u.outcome
        from usage_records u
        where ${inPeriod(period)} ${after}
        order by -u.id limit ${page.limit} offset ${page.offset}`,
  );
  return rows.map((r) => ({
    id: r.request_id,
    created_at: Math.floor(new Date(r.created_at).getTime() / 1000),
    user_id: r.user_id,
    email: r.email,
    credential:
      r.api_token_id !== null
        ? { type: 'api_token', token_id: Number(r.api_token_id), token_name: r.token_name }
        : {
            type: 'oauth_grant',
            grant_id: r.oauth_grant_id ?? '',
            client_id: r.oauth_client_id,
            client_name: r.client_name,
          },
    source: r.source,
    run_id: r.run_id,
    model: r.model,
    prompt_tokens: Number(r.prompt_tokens),
    completion_tokens: Number(r.completion_tokens),
    cached_prompt_tokens: Number(r.cached_prompt_tokens),
    cost_cents: r.cost_cents,
    credits_debited: Number(r.credits_debited),
    duration_ms: Number(r.duration_ms),
    outcome: r.outcome,
  }));
}
