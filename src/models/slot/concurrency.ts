import { randomBytes } from 'node:crypto';
import type { Db } from '../../db/client.js';
import { ASYNC_COMMIT, namedRows } from '../../db/client.js';
import { databaseUnavailable, errorOf } from '../../http/errors.js';
import { MODEL_ERRORS } from '../errors.js';
import { createBatcher } from '../../db/batch.js';

// The per-organization cap on model calls and runs in flight (CONTRACT §9), shared by every process on
// the database: a lease is a row in concurrency_leases (see src/db/tables/models.ts), kept alive by a
// heartbeat and released on finish. A process that dies stops beating; its leases expire after `ttlMs`.

export type LeaseKind = 'chat' | 'run';

export interface Lease {
  readonly orgKey: string;
  /**
   * Fires when the slot is taken back from this process (revoke): its call must end now, since its peers
   * are about to count the slot free (src/models/slot/liveness.ts, self-fencing).
   */
  readonly signal: AbortSignal;
  release(): Promise<void>;
}

export interface ConcurrencyLimiter {
  /** Takes a lease or throws 429 concurrency_limit with Retry-After. */
  acquire(orgKey: string, kind: LeaseKind): Promise<Lease>;
  /**
   * Every lease this process holds is taken back: their signals fire, none is kept for reuse (its row may
   * be gone already: a peer declared this process dead). Their releases still delete by lease id, which
   * can only remove this process's own rows.
   */
  revoke(): void;
  /**
   * Acquires of this process waiting for its own releases of their org to land before they ask for a
   * slot again (PostgreSQL store; the svc_model_admissions_waiting gauge, read at scrape).
   */
  waiting?(): number;
  close(): Promise<void>;
}

export interface LimiterOptions {
  cap: number;
  /** How long a lease outlives its last heartbeat (a killed process frees its slots after this). */
  ttlMs?: number;
  /** PostgreSQL store: how long a finished call's slot stays with this process for its next call. */
  reuseMs?: number;
  /** New lease ids, stamped with this process's tag so a dead process's leases are found (liveness.ts). */
  newLeaseId?: () => string;
}

export const DEFAULT_LEASE_TTL_MS = 30_000;
export const DEFAULT_SLOT_REUSE_MS = 250;

export const concurrencyLimited = () =>
  errorOf(
    MODEL_ERRORS,
    'concurrency_limit',
    'too many model calls or runs in flight for this organization; retry shortly',
    {
      headers: { 'Retry-After': '1' },
    },
  );

/** What a call whose lease was revoked ends with (src/models/slot/liveness.ts): the client may retry at once elsewhere. */
export const leasesRevoked = () => databaseUnavailable();

export const newLeaseId = (): string => randomBytes(12).toString('base64url');

/**
 * The leases this process holds, for either store: beaten for in one statement a third of the TTL apart
 * (`beat` gets the live lease ids), each released at most once (`drop` removes it from the store; told
 * whether the lease was revoked meanwhile).
 */
export function leaseBook(intervalMs: number, beat: (ids: string[]) => Promise<void>) {
  const live = new Map<string, string>(); // leaseId → orgKey
  const signals = new Map<string, AbortController>();
  let timer: NodeJS.Timeout | null = null;
  return {
    live,
    hand(orgKey: string, leaseId: string, drop: (leaseId: string, revoked: boolean) => Promise<void>): Lease {
      live.set(leaseId, orgKey);
      const controller = new AbortController();
      signals.set(leaseId, controller);
      timer ??= setInterval(() => {
        if (live.size === 0) return;
        beat([...live.keys()]).catch(() => {
          // A missed beat is retried next interval; the TTL is three intervals long.
        });
      }, intervalMs).unref();
      let released = false;
      return {
        orgKey,
        signal: controller.signal,
        async release() {
          if (released) return;
          released = true;
          live.delete(leaseId);
          signals.delete(leaseId);
          await drop(leaseId, controller.signal.aborted);
        },
      };
    },
    /** Fires every live lease's signal with `reason`; they are beaten for no more. */
    revoke(reason: unknown) {
      for (const controller of signals.values()) controller.abort(reason);
      signals.clear();
      live.clear();
    },
    stop() {
      if (timer) clearInterval(timer);
      timer = null;
    },
  };
}

/** A release the store did not take is tried again this often until it lands. */
export const RELEASE_RETRY_MS = 500;

/**
 * Releases that failed (the store did not answer), retried every RELEASE_RETRY_MS until they land: a live
 * process gives back what it took (STYLE: Faults), so the org's capacity returns as soon as the store does,
 * not a lease TTL later. `release` gets every lease id still waiting and throws when the store fails again.
 */
export function releaseRetrier(release: (leaseIds: string[]) => Promise<void>) {
  const waiting = new Set<string>();
  let timer: NodeJS.Timeout | null = null;
  const schedule = () => {
    timer ??= setTimeout(() => {
      timer = null;
      const ids = [...waiting];
      waiting.clear();
      release(ids).catch(() => {
        for (const id of ids) waiting.add(id);
        schedule();
      });
    }, RELEASE_RETRY_MS).unref();
  };
  return {
    failed(leaseIds: string[]) {
      for (const id of leaseIds) waiting.add(id);
      schedule();
    },
    pending: () => waiting.size,
    stop() {
      if (timer) clearTimeout(timer);
      timer = null;
    },
  };
}

// Lease statements commit without waiting for the WAL flush (ASYNC_COMMIT, src/db/client.ts). Leases are
// ephemeral: a database crash may forget the last few, which lets the cap be briefly exceeded after the
// crash — never a wrong balance. It saves one disk flush per acquire, release and heartbeat (about 5 ms
// each on the reference machine).
// Named statements (src/db/client.ts namedRows): prepared once per pooled connection, so a take, a
// release or a heartbeat skips the parse and the plan (decision 0160).
const TAKE_LEASES = `select ord from svc_take_leases($1::text[], $2::text[], $3::text[], $4::int, $5::float8)`;
const RENEW_LEASES = `update concurrency_leases set expires_at = now() + make_interval(secs => $2::float8)
  where lease_id = any($1::text[]) and ${ASYNC_COMMIT} = 'off'`;
const DROP_LEASES = `delete from concurrency_leases where lease_id = any($1::text[]) and ${ASYNC_COMMIT} = 'off'`;

interface TakeInput {
  orgKey: string;
  kind: LeaseKind;
  leaseId: string;
}

export function createPgLimiter(db: Db, options: LimiterOptions): ConcurrencyLimiter {
  const ttlMs = options.ttlMs ?? DEFAULT_LEASE_TTL_MS;
  const book = leaseBook(Math.max(100, Math.floor(ttlMs / 3)), async (ids) => {
    await namedRows(db, 'svc_renew_leases', RENEW_LEASES, [ids, ttlMs / 1000]);
  });

  // Takes are grouped (src/db/batch.ts): every acquire that arrives while a batch runs goes into the
  // next one, svc_take_leases (src/db/custom/model-path-functions.sql) taking a slot per input under
  // the unique (org_id, slot) key. Alone, an acquire is one round trip as before.
  const take = createBatcher<TakeInput, boolean>(
    async (inputs) => {
      const rows = await namedRows<{ ord: number }>(db, 'svc_take_leases', TAKE_LEASES, [
        inputs.map((i) => i.orgKey),
        inputs.map((i) => i.leaseId),
        inputs.map((i) => i.kind),
        options.cap,
        ttlMs / 1000,
      ]);
      const taken = inputs.map(() => false);
      for (const row of rows) taken[Number(row.ord) - 1] = true;
      return taken;
    },
    { maxInFlight: 1, isolateFailures: true },
  );

  // Releases are grouped the same way. A grouped release only frees a slot later, never sooner, so the
  // cap cannot be exceeded by it.
  const deleteLeases = async (ids: string[]) => {
    await namedRows(db, 'svc_drop_leases', DROP_LEASES, [ids]);
  };
  const retrier = releaseRetrier(deleteLeases);
  const drop = createBatcher<string, void>(
    async (ids) => {
      await deleteLeases(ids).catch(() => retrier.failed(ids));
      return ids.map(() => undefined);
    },
    { maxInFlight: 1 },
  );

  // Slot reuse: a finished call's slot stays with this process for `reuseMs` (its row untouched and still
  // counted against the cap); the next call of the same org and kind here takes it without a round trip.
  // A busy process thus writes no lease rows per call, and a quiet one frees its slots `reuseMs` after
  // its last call. The cap holds exactly, since a parked slot is still a row; another process can only
  // see the org at its cap `reuseMs` longer than it really was (docs/models.md, Concurrency cap).
  const reuseMs = options.reuseMs ?? DEFAULT_SLOT_REUSE_MS;
  const parked = new Map<string, { leaseId: string; kind: LeaseKind; at: number }[]>(); // orgKey → idle slots
  // Releases sent and not yet answered, per org: their rows count against the cap until they land.
  const releasing = new Map<string, Set<Promise<void>>>();
  let sweep: NodeJS.Timeout | null = null;
  let closed = false;
  let waitingForOwnRows = 0; // acquires inside ownRowsGone

  function release(orgKey: string, leaseId: string): Promise<void> {
    const sent = drop(leaseId);
    const ofOrg = releasing.get(orgKey) ?? new Set();
    releasing.set(orgKey, ofOrg.add(sent));
    const landed = () => {
      ofOrg.delete(sent);
      if (ofOrg.size === 0) releasing.delete(orgKey);
    };
    void sent.then(landed, landed);
    return sent;
  }

  function freeIdle(all: boolean): Promise<unknown> {
    const cutoff = Date.now() - reuseMs;
    const freed: Promise<void>[] = [];
    for (const [orgKey, slots] of parked) {
      const keep = all ? [] : slots.filter((s) => s.at > cutoff);
      for (const s of all ? slots : slots.filter((s) => s.at <= cutoff))
        freed.push(release(orgKey, s.leaseId));
      if (keep.length) parked.set(orgKey, keep);
      else parked.delete(orgKey);
    }
    return Promise.all(freed);
  }

  function scheduleSweep() {
    sweep ??= setTimeout(() => {
      sweep = null;
      void freeIdle(false);
      if (parked.size > 0) scheduleSweep();
    }, reuseMs).unref();
  }

  const park = (orgKey: string, kind: LeaseKind) => async (leaseId: string, revoked: boolean) => {
    if (closed || revoked) return release(orgKey, leaseId);
    const slots = parked.get(orgKey) ?? [];
    slots.push({ leaseId, kind, at: Date.now() });
    parked.set(orgKey, slots);
    scheduleSweep();
  };

  /** This process's newest idle slot of the org for `kind`, taken out of the parked ones. */
  function unpark(orgKey: string, kind: LeaseKind): string | undefined {
    const slots = parked.get(orgKey);
    const i = slots?.findLastIndex((s) => s.kind === kind) ?? -1;
    if (!slots || i < 0) return undefined;
    const [slot] = slots.splice(i, 1);
    if (slots.length === 0) parked.delete(orgKey);
    return slot!.leaseId;
  }

  /**
   * Gives back this process's idle slots of the org now and waits until every release of the org it has
   * sent has landed (each is one bounded statement: the pool's statement_timeout and query_timeout).
   * Resolves whether there was any, that is whether a take refused just before may now find a slot.
   * Releases the database failed to take (the retrier's) are not waited for: the database is failing.
   */
  async function ownRowsGone(orgKey: string): Promise<boolean> {
    for (const slot of parked.get(orgKey) ?? []) void release(orgKey, slot.leaseId); // awaited below
    parked.delete(orgKey);
    const sent = [...(releasing.get(orgKey) ?? [])];
    await Promise.all(sent);
    return sent.length > 0;
  }

  return {
    async acquire(orgKey, kind) {
      let leaseId: string | undefined; // made only when the database is asked: a reused slot keeps its own
      // An idle slot of this org and kind here first (no round trip), else a fresh one from the database.
      const claim = async (): Promise<string | undefined> => {
        const reused = unpark(orgKey, kind);
        if (reused) return reused;
        leaseId ??= (options.newLeaseId ?? newLeaseId)(); // a refused take wrote no row: its id can go again
        return (await take({ orgKey, kind, leaseId })) ? leaseId : undefined;
      };
      let got = await claim();
      if (!got) {
        // Refused, maybe by this process's own idle slots of the org, whose rows count until their delete
        // lands: a burst of exactly the cap right after calls ended was refused once with fewer calls than
        // the cap in flight (docs/limits.md, The cap right after calls end). A slot of this kind parked
        // while the take was out is taken as it is. Slots parked for the other kind (their row names that
        // kind) and those whose release is on its way are given back and waited for, then the claim is
        // made once more. Every slot handed out is still a row this process holds or one the database
        // granted under the cap, so the cap across processes holds.
        got = unpark(orgKey, kind);
        if (!got) {
          waitingForOwnRows++;
          let gone: boolean;
          try {
            gone = await ownRowsGone(orgKey);
          } finally {
            waitingForOwnRows--;
          }
          if (gone) got = await claim();
        }
      }
      if (!got) throw concurrencyLimited();
      return book.hand(orgKey, got, park(orgKey, kind));
    },
    waiting: () => waitingForOwnRows,
    revoke() {
      book.revoke(leasesRevoked());
      // Idle slots too: a peer may have deleted their rows, and reusing one would run a call with no
      // row counted against the cap. Their deletes go out like any release.
      void freeIdle(true);
    },
    async close() {
      closed = true;
      if (sweep) clearTimeout(sweep);
      sweep = null;
      await freeIdle(true);
      book.stop();
      retrier.stop();
    },
  };
}
