import { sql, type SQL } from 'drizzle-orm';

// Which rows a period's totals are summed from (docs/usage.md "The rollup"). usage_rollup
// holds the records summed per UTC hour (kept by svc_record_usage in the settle's statement), so the
// whole hours of a period are read from it: a 30-day period costs ~720 hours × the client's
// (member, credential, model) pairs, however many calls it had. A period's ends are seconds, not hours:
// each partial hour at an end is read from the records themselves (usage_records_org_time_idx), either
// the part inside the period (added) or, when that is the longer half, the whole hour from the rollup
// minus the part outside the period (subtracted). So at most half an hour of calls is read raw at each
// end, and the default period, which ends now, subtracts the (empty) rest of the current hour.
// Rollup and records are read in one statement, so both come from one snapshot: a call is in both or
// in neither.

const HOUR = 3600;

/** Unix seconds [from, to), read from the records, added (+1) or subtracted (−1). */
export interface RawPiece {
  from: number;
  to: number;
  sign: 1 | -1;
}

/** The rollup's hours [from, to) (whole hours; empty when from = to), and the raw pieces. */
export interface PeriodPlan {
  rollup: { from: number; to: number };
  raw: RawPiece[];
}

/** How the period [from, to) (Unix seconds, from < to) is summed: see the comment above. */
export function planPeriod(from: number, to: number): PeriodPlan {
  const up = Math.ceil(from / HOUR) * HOUR;
  const down = Math.floor(to / HOUR) * HOUR;
  if (up > down) {
    // Both ends inside one hour: the part itself, or the hour minus what lies on either side.
    const hour = down;
    if (to - from <= HOUR / 2) return { rollup: { from: up, to: up }, raw: [{ from, to, sign: 1 }] };
    return {
      rollup: { from: hour, to: hour + HOUR },
      raw: [
        { from: hour, to: from, sign: -1 },
        { from: to, to: hour + HOUR, sign: -1 },
      ].filter((p) => p.from < p.to) as RawPiece[],
    };
  }
  const rollup = { from: up, to: down };
  const raw: RawPiece[] = [];
  if (from < up) {
    if (up - from <= HOUR / 2) raw.push({ from, to: up, sign: 1 });
    else {
      rollup.from = up - HOUR;
      raw.push({ from: up - HOUR, to: from, sign: -1 });
    }
  }
  if (down < to) {
    if (to - down <= HOUR / 2) raw.push({ from: down, to, sign: 1 });
    else {
      rollup.to = down + HOUR;
      raw.push({ from: to, to: down + HOUR, sign: -1 });
    }
  }
  return { rollup, raw };
}

/**
 * The usage API's credential key of a record: `token:<id>` or `grant:<grant id>`. svc_record_usage
 * (src/db/custom/usage-records.sql) writes the rollup's with the same expression.
 */
export const credentialKey = (u: string) =>
  sql.raw(
    `case when ${u}.api_token_id is not null then 'token:' || ${u}.api_token_id else 'grant:' || coalesce(${u}.oauth_grant_id, '') end`,
  );

/**
 * One client's usage in the period as signed rows of (hour, user_id, credential, model, api_token_id,
 * oauth_client_id, calls, prompt_tokens, completion_tokens, cached_prompt_tokens, credits_debited,
 * cost_cents): rollup rows and signed raw records, which sum to the period's totals per any grouping.
 */
export function signedRows(orgKey: string, plan: PeriodPlan): SQL {
  const parts: SQL[] = [
    sql`select r.hour, r.user_id, r.credential, r.model, r.api_token_id, r.oauth_client_id, r.calls,
          r.prompt_tokens, r.completion_tokens, r.cached_prompt_tokens, r.credits_debited, r.cost_cents
        from usage_rollup r
        where r.org_key = ${orgKey} and r.hour >= to_timestamp(${plan.rollup.from})
          and r.hour < to_timestamp(${plan.rollup.to})`,
  ];
  for (const p of plan.raw) {
    const s = sql.raw(String(p.sign));
    parts.push(
      sql`select date_trunc('hour', u.created_at, 'UTC'), u.user_id, ${credentialKey('u')}, u.model, u.api_token_id,
            u.oauth_client_id, ${s}, ${s} * u.prompt_tokens, ${s} * u.completion_tokens,
            ${s} * u.cached_prompt_tokens, ${s} * u.credits_debited, ${s} * u.cost_cents
          from usage_records u
          where u.org_key = ${orgKey} and u.created_at >= to_timestamp(${p.from})
            and u.created_at < to_timestamp(${p.to})`,
    );
  }
  return sql.join(parts, sql` union all `);
}
