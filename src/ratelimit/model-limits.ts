import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { AppError, errorOf } from '../http/errors.js';
import type { Logger } from '../log.js';
import type {
  RollingWindows,
  WindowAdmission,
  WindowCount,
  WindowEntry,
  WindowState,
} from './rolling-window.js';
import { RATELIMIT_ERRORS } from './errors.js';

// RPM and TPM limits of model calls and run steps, per organization and per credential (CONTRACT §11
// "Rate limits"), each a rolling minute in the store every process shares (src/ratelimit/rolling-window.ts:
// the database by default, Redis when REDIS_URL is set). A call is admitted against the tokens its hold
// may use (prompt bound + capped output) and corrected to what it really used at its settle.
//
// The limits themselves are read by one statement for the whole process every LIMITS_REFRESH_MS (and at
// once after a change through this process), never per call: with no limit set, a call costs a map lookup.
// That statement reads only rows with a limit (the partial indexes of src/db/custom/rate-windows.sql).

/** How soon a limit set through another process applies here. */
export const LIMITS_REFRESH_MS = 5_000;

export interface RateLimitValues {
  rpm: number | null;
  tpm: number | null;
}

/** One window's state as the rate-limit headers show it. */
export interface RateWindow {
  limit: number;
  remaining: number;
  /** Milliseconds until the window is fully replenished (its newest counted call leaves it). */
  resetMs: number;
}

export interface RateAdmission {
  requests?: RateWindow;
  tokens?: RateWindow;
  /** The call's real token count once settled (0 for a call that used nothing): the hold's excess goes back. */
  settle(actualTokens: number): void;
}

type Metric = 'rpm' | 'tpm';
type Counted = WindowCount & { metric: Metric };

/** `others`: every window the refused call was counted against, as the headers show them. */
const refusals = new WeakMap<AppError, { others: Pick<RateAdmission, 'requests' | 'tokens'> }>();

/** The windows of a 429 rate_limit_exceeded, for the front-end's headers. */
export const refusalOf = (err: unknown) => (err instanceof AppError ? refusals.get(err) : undefined);

export interface ModelRateLimits {
  /** Counts a call of `tokens` (its hold's most) against its org's and credential's limits; null when none. */
  admit(orgKey: string, apiTokenId: number | null, tokens: number): Promise<RateAdmission | null>;
  /** Reads the limits again now (after a change through this process). */
  refresh(): Promise<void>;
  close(): void;
}

/** The limits the periodic scan reads: only rows that have one (partial indexes orgs_limited, api_tokens_limited). */
export const limitedRowsQuery = () =>
  sql`select 'o' as kind, id, rpm_limit as rpm, tpm_limit as tpm from orgs
       where deleted_at is null and (rpm_limit is not null or tpm_limit is not null)
      union all
      select 't', id::text, rpm_limit, tpm_limit from api_tokens
       where revoked_at is null and (rpm_limit is not null or tpm_limit is not null)`;

export function createModelRateLimits(ctx: {
  db: Db;
  windows: RollingWindows;
  log: Logger;
}): ModelRateLimits {
  let orgLimits = new Map<string, RateLimitValues>();
  let tokenLimits = new Map<number, RateLimitValues>();
  let first: Promise<void> | null = null;
  let timer: NodeJS.Timeout | undefined;

  async function load() {
    const rows = await queryRows<{ kind: string; id: string; rpm: number | null; tpm: number | null }>(
      ctx.db,
      limitedRowsQuery(),
    );
    const orgsNext = new Map<string, RateLimitValues>();
    const tokensNext = new Map<number, RateLimitValues>();
    for (const r of rows) {
      const v = { rpm: r.rpm === null ? null : Number(r.rpm), tpm: r.tpm === null ? null : Number(r.tpm) };
      if (r.kind === 'o') orgsNext.set(r.id, v);
      else tokensNext.set(Number(r.id), v);
    }
    orgLimits = orgsNext;
    tokenLimits = tokensNext;
  }

  function started(): Promise<void> {
    if (!first) {
      first = load();
      timer = setInterval(() => {
        load().catch((err: unknown) => ctx.log.warn({ err }, 'could not read the rate limits'));
      }, LIMITS_REFRESH_MS);
      timer.unref();
    }
    return first;
  }

  async function admit(orgKey: string, apiTokenId: number | null, tokens: number) {
    await started();
    const org = orgLimits.get(orgKey);
    const token = apiTokenId === null ? undefined : tokenLimits.get(apiTokenId);
    if (!org && !token) return null;
    // The key names the metric and the holder, not the limit: a changed limit keeps what was counted.
    const counted: Counted[] = [];
    const add = (holder: string, v: RateLimitValues | undefined) => {
      if (v?.rpm) counted.push({ metric: 'rpm', key: `rpm:${holder}`, limit: v.rpm, amount: 1 });
      if (v?.tpm)
        counted.push({ metric: 'tpm', key: `tpm:${holder}`, limit: v.tpm, amount: Math.max(1, tokens) });
    };
    add(`org:${orgKey}`, org);
    if (apiTokenId !== null) add(`token:${apiTokenId}`, token);
    let result: WindowAdmission;
    try {
      result = await ctx.windows.admit(counted);
    } catch (err) {
      ctx.log.error({ err }, 'rate-limit store unavailable');
      throw errorOf(RATELIMIT_ERRORS, 'RATE_LIMIT_UNAVAILABLE', undefined, {
        headers: { 'Retry-After': '5' },
      });
    }
    const shown = headerWindows(counted, result.states);
    if (!result.admitted) throw refused(counted, result.states, shown);
    return admission(counted, result.entries, shown);
  }

  function admission(
    counted: Counted[],
    entries: WindowEntry[],
    shown: Pick<RateAdmission, 'requests' | 'tokens'>,
  ): RateAdmission {
    let settled = false;
    return {
      ...shown,
      settle(actualTokens) {
        if (settled) return;
        settled = true;
        entries.forEach((entry, i) => {
          if (counted[i]!.metric !== 'tpm' || entry.amount === actualTokens) return;
          ctx.windows
            .correct(entry, actualTokens)
            .catch((err: unknown) => ctx.log.warn({ err }, 'could not correct a rate-limit window'));
        });
      },
    };
  }

  return {
    admit,
    refresh: async () => {
      await started();
      await load();
    },
    close: () => {
      clearInterval(timer);
      ctx.windows.close();
    },
  };
}

/** Per metric, the tighter of the organization's and the credential's windows: the one with the least left. */
function headerWindows(
  counted: Counted[],
  states: WindowState[],
): Pick<RateAdmission, 'requests' | 'tokens'> {
  const tightest = (metric: Metric): RateWindow | undefined => {
    let best: RateWindow | undefined;
    counted.forEach((c, i) => {
      if (c.metric !== metric) return;
      const s = states[i]!;
      const w = { limit: c.limit, remaining: Math.max(0, c.limit - s.used), resetMs: s.resetMs };
      if (!best || w.remaining < best.remaining) best = w;
    });
    return best;
  };
  return { requests: tightest('rpm'), tokens: tightest('tpm') };
}

/**
 * 429 rate_limit_exceeded: Retry-After is when the call would fit every window it was refused by, in
 * whole seconds rounded up (a call above a limit by itself can never fit: a minute, and the message says
 * why).
 */
function refused(
  counted: Counted[],
  states: WindowState[],
  shown: Pick<RateAdmission, 'requests' | 'tokens'>,
) {
  let waitMs = 0;
  let never: Counted | undefined;
  let over: Counted | undefined;
  counted.forEach((c, i) => {
    const retry = states[i]!.retryMs;
    if (retry === null) never ??= c;
    else if (retry > waitMs) {
      waitMs = retry;
      over = c;
    }
  });
  const what = (c: Counted) => `${c.limit} ${c.metric === 'rpm' ? 'requests' : 'tokens'} per minute`;
  const seconds = never ? 60 : Math.max(1, Math.ceil(waitMs / 1000));
  const message = never
    ? `this call may use ${never.amount} tokens, more than the limit of ${what(never)}; lower max_tokens`
    : `rate limit reached: ${what(over ?? counted[0]!)}; try again in ${seconds} s`;
  const err = errorOf(RATELIMIT_ERRORS, 'rate_limit_exceeded', message, {
    headers: { 'Retry-After': String(seconds) },
  });
  refusals.set(err, { others: shown });
  return err;
}

/** OpenAI writes a reset as a Go duration: `6s`, `1m0s`, `120ms` (x-ratelimit-reset-*). */
export function openAiDuration(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`;
  const total = Math.ceil(ms / 1000);
  const m = Math.floor(total / 60);
  const s = total % 60;
  return m ? `${m}m${s}s` : `${s}s`;
}

/** The rate-limit headers of a model answer, in the vendor's names and formats (CONTRACT §11). */
export function rateLimitHeaders(
  a: Pick<RateAdmission, 'requests' | 'tokens'>,
  style: 'openai' | 'anthropic',
  now = Date.now(),
): Record<string, string> {
  const out: Record<string, string> = {};
  const put = (kind: 'requests' | 'tokens', w: RateWindow | undefined) => {
    if (!w) return;
    if (style === 'openai') {
      out[`x-ratelimit-limit-${kind}`] = String(w.limit);
      out[`x-ratelimit-remaining-${kind}`] = String(w.remaining);
      out[`x-ratelimit-reset-${kind}`] = openAiDuration(w.resetMs);
    } else {
      out[`anthropic-ratelimit-${kind}-limit`] = String(w.limit);
      out[`anthropic-ratelimit-${kind}-remaining`] = String(w.remaining);
      out[`anthropic-ratelimit-${kind}-reset`] = new Date(now + w.resetMs)
        .toISOString()
        .replace(/\.\d{3}Z$/, 'Z');
    }
  };
  put('requests', a.requests);
  put('tokens', a.tokens);
  return out;
}
