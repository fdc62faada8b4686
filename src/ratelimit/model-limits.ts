import { sql } from 'drizzle-orm';
import { RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { queryRows, type Db } from '../db/client.js';
import { AppError } from '../http/errors.js';
import type { Logger } from '../log.js';
import type { Policy } from './failure-limiter.js';

// RPM and TPM limits of model calls, per organization and per credential (CONTRACT §11 "Rate limits").
// The windows are rate-limiter-flexible's, in the store every process shares (src/ratelimit/limits.ts:
// Redis when REDIS_URL is set, else PostgreSQL, else memory for the one PGlite process). A call is admitted
// against the tokens its hold may use (prompt bound + capped output) and corrected at its settle.
//
// The limits themselves are read by one statement for the whole process every LIMITS_REFRESH_MS (and at
// once after a change through this process), never per call: with no limit set, a call costs a map lookup.

/** How soon a limit set through another process applies here. */
export const LIMITS_REFRESH_MS = 5_000;
/** The rolling window the limits count in: a minute (CONTRACT §11). */
export const WINDOW_SECONDS = 60;

export interface RateLimitValues {
  rpm: number | null;
  tpm: number | null;
}

/** One window's state as the rate-limit headers show it. */
export interface RateWindow {
  limit: number;
  remaining: number;
  /** Milliseconds until the window frees. */
  resetMs: number;
}

export interface RateAdmission {
  requests?: RateWindow;
  tokens?: RateWindow;
  /** The call's real token count once settled (0 for a call that used nothing): the hold's excess goes back. */
  settle(actualTokens: number): void;
}

type Metric = 'rpm' | 'tpm';
interface Counted {
  metric: Metric;
  key: string;
  limit: number;
  points: number;
}

const refusals = new WeakMap<AppError, RateWindow & { metric: Metric; others: RateAdmission }>();

/** The window a 429 rate_limit_exceeded refused, for the front-end's headers. */
export const refusalOf = (err: unknown) => (err instanceof AppError ? refusals.get(err) : undefined);

export interface ModelRateLimits {
  /** Counts a call of `tokens` (its hold's most) against its org's and credential's limits; null when none. */
  admit(orgKey: string, apiTokenId: number | null, tokens: number): Promise<RateAdmission | null>;
  /** Reads the limits again now (after a change through this process). */
  refresh(): Promise<void>;
  close(): void;
}

export function createModelRateLimits(ctx: {
  db: Db;
  window: (p: Policy) => RateLimiterAbstract;
  log: Logger;
}): ModelRateLimits {
  let orgLimits = new Map<string, RateLimitValues>();
  let tokenLimits = new Map<number, RateLimitValues>();
  let first: Promise<void> | null = null;
  let timer: NodeJS.Timeout | undefined;
  const windows = new Map<string, RateLimiterAbstract>();

  async function load() {
    const rows = await queryRows<{ kind: string; id: string; rpm: number | null; tpm: number | null }>(
      ctx.db,
      sql`select 'o' as kind, id, rpm_limit as rpm, tpm_limit as tpm from orgs
           where deleted_at is null and (rpm_limit is not null or tpm_limit is not null)
          union all
          select 't', id::text, rpm_limit, tpm_limit from api_tokens
           where revoked_at is null and (rpm_limit is not null or tpm_limit is not null)`,
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

  /** One limiter per (metric, limit): the key prefix is the metric's, so a changed limit keeps the count. */
  function windowFor(metric: Metric, limit: number): RateLimiterAbstract {
    const id = `${metric}:${limit}`;
    let w = windows.get(id);
    if (!w) {
      w = ctx.window({ name: `model-${metric}`, points: limit, durationSeconds: WINDOW_SECONDS });
      windows.set(id, w);
    }
    return w;
  }

  const giveBack = (c: Counted, points: number) => {
    if (points <= 0) return;
    windowFor(c.metric, c.limit)
      .reward(c.key, points)
      .catch((err: unknown) => ctx.log.warn({ err }, 'could not correct a rate-limit window'));
  };

  async function admit(orgKey: string, apiTokenId: number | null, tokens: number) {
    await started();
    const org = orgLimits.get(orgKey);
    const token = apiTokenId === null ? undefined : tokenLimits.get(apiTokenId);
    if (!org && !token) return null;
    const counted: Counted[] = [];
    const add = (scope: string, v: RateLimitValues | undefined) => {
      if (v?.rpm) counted.push({ metric: 'rpm', key: `${scope}`, limit: v.rpm, points: 1 });
      if (v?.tpm) counted.push({ metric: 'tpm', key: `${scope}`, limit: v.tpm, points: Math.max(1, tokens) });
    };
    add(`org:${orgKey}`, org);
    add(`token:${apiTokenId}`, token);
    const done: { c: Counted; res: RateLimiterRes }[] = [];
    for (const c of counted) {
      try {
        done.push({ c, res: await windowFor(c.metric, c.limit).consume(c.key, c.points) });
      } catch (rejection) {
        for (const d of done) giveBack(d.c, d.c.points);
        if (!(rejection instanceof RateLimiterRes)) throw rejection;
        // A refused call is not counted (CONTRACT §11: what is admitted counts).
        giveBack(c, c.points);
        throw refused(c, rejection);
      }
    }
    return admission(done);
  }

  function admission(done: { c: Counted; res: RateLimiterRes }[]): RateAdmission {
    // The tighter of the organization's and the credential's: the window with the least left.
    const tightest = (metric: Metric): RateWindow | undefined => {
      let best: RateWindow | undefined;
      for (const { c, res } of done) {
        if (c.metric !== metric) continue;
        const w = { limit: c.limit, remaining: Math.max(0, res.remainingPoints), resetMs: res.msBeforeNext };
        if (!best || w.remaining < best.remaining) best = w;
      }
      return best;
    };
    let settled = false;
    return {
      requests: tightest('rpm'),
      tokens: tightest('tpm'),
      settle(actualTokens) {
        if (settled) return;
        settled = true;
        for (const { c } of done) {
          if (c.metric !== 'tpm') continue;
          if (actualTokens < c.points) giveBack(c, c.points - actualTokens);
          else if (actualTokens > c.points) {
            windowFor(c.metric, c.limit)
              .penalty(c.key, actualTokens - c.points)
              .catch((err: unknown) => ctx.log.warn({ err }, 'could not correct a rate-limit window'));
          }
        }
      },
    };
  }

  function refused(c: Counted, res: RateLimiterRes): AppError {
    const seconds = Math.max(1, Math.ceil(res.msBeforeNext / 1000));
    const what = c.metric === 'rpm' ? 'requests' : 'tokens';
    const err = new AppError(
      429,
      'rate_limit_exceeded',
      `rate limit reached: ${c.limit} ${what} per minute; try again in ${seconds} s`,
      { headers: { 'Retry-After': String(seconds) } },
    );
    const window = { limit: c.limit, remaining: 0, resetMs: res.msBeforeNext };
    refusals.set(err, {
      ...window,
      metric: c.metric,
      others: { [c.metric === 'rpm' ? 'requests' : 'tokens']: window, settle: () => {} },
    });
    return err;
  }

  return {
    admit,
    refresh: async () => {
      await started();
      await load();
    },
    close: () => clearInterval(timer),
  };
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
