import { randomBytes } from 'node:crypto';
import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { queryRows } from '../db/client.js';
import { AppError } from '../http/errors.js';

// The per-organization cap on model calls and runs in flight (CONTRACT §9), shared by every process on
// the database: a lease is a row in concurrency_leases (see src/db/tables/models.ts), kept alive by a
// heartbeat and released on finish. A process that dies stops beating; its leases expire after `ttlMs`.

export type LeaseKind = 'chat' | 'run';

export interface Lease {
  readonly orgKey: string;
  release(): Promise<void>;
}

export interface ConcurrencyLimiter {
  /** Takes a lease or throws 429 concurrency_limit with Retry-After. */
  acquire(orgKey: string, kind: LeaseKind): Promise<Lease>;
  close(): Promise<void>;
}

export interface LimiterOptions {
  cap: number;
  /** How long a lease outlives its last heartbeat (a killed process frees its slots after this). */
  ttlMs?: number;
}

export const DEFAULT_LEASE_TTL_MS = 30_000;

export const concurrencyLimited = () =>
  new AppError(429, 'concurrency_limit', 'too many model calls or runs in flight for this organization; retry shortly', {
    headers: { 'Retry-After': '1' },
  });

export const newLeaseId = (): string => randomBytes(12).toString('base64url');

/**
 * The leases this process holds, for either store: beaten for in one statement a third of the TTL apart
 * (`beat` gets the live lease ids), each released at most once (`drop` removes it from the store).
 */
export function leaseBook(intervalMs: number, beat: (ids: string[]) => Promise<void>) {
  const live = new Map<string, string>(); // leaseId → orgKey
  let timer: NodeJS.Timeout | null = null;
  return {
    live,
    hand(orgKey: string, leaseId: string, drop: (leaseId: string) => Promise<void>): Lease {
      live.set(leaseId, orgKey);
      timer ??= setInterval(() => {
        if (live.size === 0) return;
        beat([...live.keys()]).catch(() => {
          // A missed beat is retried next interval; the TTL is three intervals long.
        });
      }, intervalMs).unref();
      let released = false;
      return {
        orgKey,
        async release() {
          if (released) return;
          released = true;
          live.delete(leaseId);
          await drop(leaseId);
        },
      };
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = null;
    },
  };
}

/**
 * Lease statements commit without waiting for the WAL flush: `set_config('synchronous_commit', 'off',
 * true)` in the statement itself scopes it to the statement's own transaction (one round trip, no
 * BEGIN/COMMIT). Leases are ephemeral: a database crash may forget the last few, which lets the cap be
 * briefly exceeded after the crash — never a wrong balance. It saves one disk flush per acquire, release
 * and heartbeat (about 5 ms each on the reference machine).
 */
const ASYNC_COMMIT = sql`(select set_config('synchronous_commit', 'off', true))`;

export function createPgLimiter(db: Db, options: LimiterOptions): ConcurrencyLimiter {
  const ttlMs = options.ttlMs ?? DEFAULT_LEASE_TTL_MS;
  const ttl = sql`make_interval(secs => ${ttlMs / 1000})`;
  const book = leaseBook(Math.max(100, Math.floor(ttlMs / 3)), async (ids) => {
    await db.execute(sql`update concurrency_leases set expires_at = now() + ${ttl}
      where lease_id in (${sql.join(ids.map((id) => sql`${id}`), sql`, `)}) and ${ASYNC_COMMIT} = 'off'`);
  });

  /**
   * One statement: pick a slot that looks free and take it; the unique (org_id, slot) key makes
   * two takers of the same slot serialise, and the loser's guarded update (only over an expired lease)
   * returns nothing, so it retries against a fresh snapshot.
   */
  async function tryTake(orgKey: string, kind: LeaseKind, leaseId: string): Promise<boolean> {
    // Scan from a random slot and stop at the first free one: concurrent takers spread over the slots,
    // and a large cap costs a probe or two, not one per slot.
    const start = Math.floor(Math.random() * options.cap);
    const rows = await queryRows<{ slot: number }>(
      db,
      sql`insert into concurrency_leases (org_id, slot, lease_id, kind, expires_at)
          select ${orgKey}, s, ${leaseId}, ${kind}, now() + ${ttl}
          from (select (i + ${start}) % ${options.cap}::int as s from generate_series(0, ${options.cap - 1}::int) as i) as slots
          where ${ASYNC_COMMIT} = 'off'
            and not exists (select 1 from concurrency_leases l where l.org_id = ${orgKey} and l.slot = s and l.expires_at > now())
          limit 1
          on conflict (org_id, slot) do update
            set lease_id = excluded.lease_id, kind = excluded.kind, expires_at = excluded.expires_at, acquired_at = now()
            where concurrency_leases.expires_at <= now()
          returning slot`,
    );
    return rows.length > 0;
  }

  // Releases are grouped: at most one DELETE is in flight, and every release that arrives meanwhile goes
  // into the next one (group commit). Under load that is one statement for many calls instead of one each;
  // alone it is the same single round trip. A grouped release only frees a slot later, never sooner, so
  // the cap cannot be exceeded by it. Each release() still resolves only once its row is gone.
  let pending: { id: string; done: () => void }[] = [];
  let flushing = false;
  async function flushReleases() {
    if (flushing) return;
    flushing = true;
    while (pending.length > 0) {
      const batch = pending;
      pending = [];
      await db
        .execute(sql`delete from concurrency_leases where lease_id in (${sql.join(batch.map((b) => sql`${b.id}`), sql`, `)}) and ${ASYNC_COMMIT} = 'off'`)
        .catch(() => {
          // Unreleased, the leases expire by themselves within the TTL.
        });
      for (const b of batch) b.done();
    }
    flushing = false;
  }
  const releaseLease = (id: string) =>
    new Promise<void>((done) => {
      pending.push({ id, done });
      void flushReleases();
    });

  return {
    async acquire(orgKey, kind) {
      const leaseId = newLeaseId();
      let taken = false;
      for (let attempt = 0; attempt < 2 && !taken; attempt++) taken = await tryTake(orgKey, kind, leaseId);
      if (!taken) throw concurrencyLimited();
      return book.hand(orgKey, leaseId, releaseLease);
    },
    async close() {
      book.stop();
    },
  };
}
