import { sql, type SQL } from 'drizzle-orm';

// The usage API's totals read usage_rollup, the records summed per UTC hour, member, credential and
// model, kept by svc_record_usage in the settle's statement (docs/usage.md "The rollup"). Reconciliation
// checks that the rollup equals the records it sums: the full check over every hour, the incremental one
// over the hours that records written since the checkpoint fell in (reconcile-checkpoint.ts).

/** A usage record's (`u`) rollup key: its client, UTC hour, member, credential and model. */
export const recordKey = sql`u.org_key, date_trunc('hour', u.created_at, 'UTC'), u.user_id,
  case when u.api_token_id is not null then 'token:' || u.api_token_id
       else 'grant:' || coalesce(u.oauth_grant_id, '') end, u.model`;

/** The records summed by the rollup's key; `where` narrows which records (`u`) are read. */
const recordSums = (from: SQL, where: SQL) =>
  sql`select u.org_key, date_trunc('hour', u.created_at, 'UTC') as hour, u.user_id,
        case when u.api_token_id is not null then 'token:' || u.api_token_id
             else 'grant:' || coalesce(u.oauth_grant_id, '') end as credential,
        u.model, count(*) as calls, sum(u.prompt_tokens) as prompt_tokens,
        sum(u.completion_tokens) as completion_tokens, sum(u.cached_prompt_tokens) as cached_prompt_tokens,
        sum(u.credits_debited) as credits_debited, sum(u.cost_cents) as cost_cents
      from ${from} where ${where} group by 1, 2, 3, 4, 5`;

/** Rollup rows and record sums that differ (either missing, or any sum different). */
const differences = (raw: SQL, rollup: SQL) =>
  sql`select org_key, hour, user_id, credential, model, s.calls as records_calls, r.calls as rollup_calls,
        s.credits_debited as records_debited, r.credits_debited as rollup_debited
      from (${raw}) s full join (${rollup}) r using (org_key, hour, user_id, credential, model)
      where (s.calls, s.prompt_tokens, s.completion_tokens, s.cached_prompt_tokens, s.credits_debited, s.cost_cents)
        is distinct from (r.calls, r.prompt_tokens, r.completion_tokens, r.cached_prompt_tokens, r.credits_debited,
                          r.cost_cents)`;

const ROLLUP_COLUMNS = sql`r.org_key, r.hour, r.user_id, r.credential, r.model, r.calls, r.prompt_tokens,
  r.completion_tokens, r.cached_prompt_tokens, r.credits_debited, r.cost_cents`;

/** Every rollup row against every record (the full check). */
export const rollupDiffersFull = differences(
  recordSums(sql`usage_records u`, sql`true`),
  sql`select ${ROLLUP_COLUMNS} from usage_rollup r`,
);

/**
 * The hours (of a client) that usage records with an id above `lastUsageRecordId` fell in: their rollup
 * rows against all their records, read through usage_records_org_time_idx and the rollup's key.
 */
export function rollupDiffersSince(lastUsageRecordId: number): SQL {
  const touched = sql`(select distinct org_key, date_trunc('hour', created_at, 'UTC') as hour
                       from usage_records where id > ${lastUsageRecordId})`;
  return differences(
    recordSums(
      sql`${touched} t join usage_records u on u.org_key = t.org_key and u.created_at >= t.hour
            and u.created_at < t.hour + interval '1 hour'`,
      sql`true`,
    ),
    sql`select ${ROLLUP_COLUMNS} from ${touched} t
        join usage_rollup r on r.org_key = t.org_key and r.hour = t.hour`,
  );
}

/**
 * The full check's cheap form (reconcile-full.ts): Σ over records of w(key) × (k · values) against the
 * same over rollup rows, where w(key) is the rollup key hashed under `seed` (odd, so never zero) and k a
 * vector of random multipliers, one per summed column (a call counts 1). Equal when every rollup row
 * equals its records' sums; a rollup row with no calls (which the records cannot show) is counted apart.
 */
export function rollupChecksums(seed: number, k: readonly number[]): { records: SQL; rollup: SQL } {
  const weight = (key: SQL) => sql`(hash_record_extended(row(${key}), ${seed}) | 1)::numeric`;
  const [calls, prompt, completion, cached, debited, cost] = k.map((x) => sql`${x}::numeric`);
  const values = (t: string, callsColumn: SQL) =>
    sql`(${calls} * ${callsColumn} + ${prompt} * ${sql.raw(t)}.prompt_tokens
         + ${completion} * ${sql.raw(t)}.completion_tokens + ${cached} * ${sql.raw(t)}.cached_prompt_tokens
         + ${debited} * ${sql.raw(t)}.credits_debited + ${cost} * ${sql.raw(t)}.cost_cents)`;
  return {
    records: sql`select coalesce(sum(${weight(recordKey)} * ${values('u', sql`1`)}), 0) as sum
                 from usage_records u`,
    rollup: sql`select coalesce(sum(${weight(sql`r.org_key, r.hour, r.user_id, r.credential, r.model`)}
                                     * ${values('r', sql`r.calls`)}), 0) as sum,
                  count(*) filter (where r.calls < 1) as empty
                from usage_rollup r`,
  };
}
