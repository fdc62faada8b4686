import { sql } from 'drizzle-orm';
import pg from 'pg';
import { queryRows, type Database, type Db } from '../db/client.js';
import { errorOf, type AppError } from '../http/errors.js';
import { BILLING_ERRORS } from './errors.js';
import type { Logger } from '../log.js';

// The calls and runs in flight of each client, so that deleting a client ends them (CONTRACT §8: "deleting
// a client stops new calls at once, ends its calls and runs in flight (billed for what ran), and returns
// its balance to the pool when they have settled").
//
// Each process keeps its own registry: a chat call registers while it waits for its provider (a stream
// while it relays), a run socket for as long as it is authenticated. The deletion's transaction sends
// `NOTIFY svc_org_deleted, '<org key>'` (announceDeletedOrg, an orgDeleted hook); PostgreSQL delivers it at
// commit — never for a deletion rolled back — to every session that LISTENs, and every svc process (each
// worker of WEB_CONCURRENCY, each process on the same database) listens on a connection of its own, its
// own deletions included, so one path serves one process and many. PGlite delivers the same notification
// to its in-process listener. What a call does when it is ended is its own (src/models/front-ends/chat.ts: the
// provider is aborted, what was delivered is billed, the stream ends with an error event; src/runs:
// the run is aborted and billed, an `error` frame, close 4403); its hold was re-pointed at the owner's
// pool by the deletion (deleted-client.ts), so the tokens it does not spend return there as it settles.
//
// Two gaps are closed: a call admitted just before the deletion committed but registered just after its
// notification is ended as it registers (each ended org is remembered for ENDED_MEMORY_MS); and a
// notification lost while the listening connection was down is made up when it reconnects, by reading
// which of the clients with calls here were deleted meanwhile. A client whose listener cannot reconnect
// runs its calls to their end, each still bounded by its hold (the state before this file), and it is
// logged.

export const ORG_DELETED_CHANNEL = 'svc_org_deleted';
/** How long an ended client is remembered, for a call admitted before its deletion that registers after. */
export const ENDED_MEMORY_MS = 60_000;
/** The listening connection is opened again after this long, doubling up to RECONNECT_MAX_MS. */
const RECONNECT_MIN_MS = 500;
const RECONNECT_MAX_MS = 30_000;

/** The error a deleted client's calls end with (an OpenAI error event; a run's `error` frame). */
export const clientDeleted = () => errorOf(BILLING_ERRORS, 'CLIENT_DELETED');

export interface LiveCalls {
  /**
   * Registers a call or run of `orgKey`; `end` is called at most once, when the client is deleted (at
   * once when it already was). Returns the call's unregister, to be called when it ends by itself.
   */
  track(orgKey: string, end: (reason: AppError) => void): () => void;
  /**
   * track() as a signal: aborted (its reason clientDeleted()) when the client is deleted, or with
   * `alsoEndedBy`'s reason when that fires first. `done` when the call is over.
   */
  watch(orgKey: string, alsoEndedBy?: AbortSignal): { signal: AbortSignal; done: () => void };
  /** Ends every call and run of `orgKey` in this process; returns how many. */
  endOrg(orgKey: string): number;
  /** Calls and runs registered now (tests, metrics). */
  size(): number;
  /** The clients with calls or runs registered now. */
  orgs(): string[];
  close(): Promise<void>;
}

/** Org-deleted hook (in the deletion's transaction): every process hears of it when it commits. */
export async function announceDeletedOrg(tx: Db, org: { orgKey: string }): Promise<void> {
  await tx.execute(sql`select pg_notify(${ORG_DELETED_CHANNEL}, ${org.orgKey})`);
}

/** The registry, without a listener (the listener calls endOrg). */
export function createRegistry(): LiveCalls {
  const live = new Map<string, Set<(reason: AppError) => void>>();
  const ended = new Map<string, number>();

  const forgetEnded = (now: number) => {
    for (const [org, until] of ended) if (until <= now) ended.delete(org);
  };

  const track = (orgKey: string, end: (reason: AppError) => void) => {
    if ((ended.get(orgKey) ?? 0) > Date.now()) {
      // Admitted before the deletion committed, registered after it was heard of: ended now.
      queueMicrotask(() => end(clientDeleted()));
      return () => {};
    }
    let calls = live.get(orgKey);
    if (!calls) live.set(orgKey, (calls = new Set()));
    // A fresh function per call, so one `end` registered twice is two entries.
    const entry = (reason: AppError) => end(reason);
    const registeredIn = calls;
    registeredIn.add(entry);
    return () => {
      registeredIn.delete(entry);
      if (registeredIn.size === 0 && live.get(orgKey) === registeredIn) live.delete(orgKey);
    };
  };

  return {
    track,
    // One controller and a listener, not AbortSignal.any, which costs about twice as much per call on
    // Node.js 20 (docs/decisions/0166-one-signal-ends-a-call.md).
    watch(orgKey, alsoEndedBy) {
      const controller = new AbortController();
      const end = (reason: unknown) => controller.abort(reason);
      const untrack = track(orgKey, end);
      if (!alsoEndedBy) return { signal: controller.signal, done: untrack };
      const endWithIt = () => end(alsoEndedBy.reason);
      if (alsoEndedBy.aborted) endWithIt();
      else alsoEndedBy.addEventListener('abort', endWithIt, { once: true });
      const done = () => {
        untrack();
        alsoEndedBy.removeEventListener('abort', endWithIt);
      };
      return { signal: controller.signal, done };
    },
    endOrg(orgKey) {
      const now = Date.now();
      forgetEnded(now);
      ended.set(orgKey, now + ENDED_MEMORY_MS);
      // Taken out first: each call's `end` runs once, and an unregister after it finds nothing.
      const calls = live.get(orgKey);
      live.delete(orgKey);
      if (!calls) return 0;
      const reason = clientDeleted();
      for (const end of calls) end(reason);
      return calls.size;
    },
    size() {
      let n = 0;
      for (const calls of live.values()) n += calls.size;
      return n;
    },
    orgs: () => [...live.keys()],
    close() {
      live.clear();
      ended.clear();
      return Promise.resolve();
    },
  };
}

/** Orgs with calls here that were deleted (a catch-up after notifications may have been missed). */
async function deletedAmong(db: Db, orgKeys: string[]): Promise<string[]> {
  if (orgKeys.length === 0) return [];
  const rows = await queryRows<{ id: string }>(
    db,
    sql`select id from orgs where id = any(${sql.param(orgKeys)}::text[]) and deleted_at is not null`,
  );
  return rows.map((r) => r.id);
}

/**
 * The registry with this process's listener: a connection of its own on PostgreSQL (LISTEN needs a
 * session that stays open; it is not taken from the pool), the engine's listener on PGlite.
 */
export async function createLiveCalls(database: Database, log: Logger): Promise<LiveCalls> {
  const registry = createRegistry();
  const heard = (orgKey: string) => {
    const n = registry.endOrg(orgKey);
    if (n > 0) log.info({ orgKey, ended: n }, 'client deleted: its calls and runs in flight were ended');
    return n;
  };
  let stop: () => Promise<void> = async () => {};

  if (database.pglite) {
    const unlisten = await database.pglite.listen(ORG_DELETED_CHANNEL, heard);
    stop = () => unlisten();
  } else if (database.pool) {
    stop = await listenOnPostgres(database, log, heard, async () => {
      // (Re)connected: a deletion committed while no connection listened was not heard; read them.
      for (const orgKey of await deletedAmong(database.db, registry.orgs())) heard(orgKey);
    });
  }

  return {
    ...registry,
    endOrg: heard,
    async close() {
      await stop();
      await registry.close();
    },
  };
}

/**
 * LISTEN on a connection of its own, opened again (with back-off) whenever it is lost; returns once the
 * first attempt is over (listening, or a reconnect scheduled), with the function that stops it.
 */
async function listenOnPostgres(
  database: Database,
  log: Logger,
  heard: (orgKey: string) => unknown,
  catchUp: () => Promise<void>,
): Promise<() => Promise<void>> {
  let client: pg.Client | null = null;
  let closed = false;
  let retryMs = RECONNECT_MIN_MS;
  let timer: NodeJS.Timeout | null = null;

  const schedule = () => {
    if (closed || timer) return;
    timer = setTimeout(() => {
      timer = null;
      void connect();
    }, retryMs);
    timer.unref();
    retryMs = Math.min(RECONNECT_MAX_MS, retryMs * 2);
  };

  async function connect() {
    // The pool's settings (its client class included: src/db/client.ts), TCP keep-alive so that a peer
    // that vanished is noticed.
    const c = new pg.Client({ ...database.pool!.options, keepAlive: true });
    client = c;
    const lost = (err?: unknown) => {
      if (client !== c) return;
      client = null;
      c.removeAllListeners('notification');
      void c.end().catch(() => {});
      if (!closed) {
        log.warn({ err }, 'the listener for deleted clients lost its connection; reconnecting');
        schedule();
      }
    };
    c.on('error', lost);
    c.on('end', () => lost());
    c.on('notification', (n) => {
      if (n.channel === ORG_DELETED_CHANNEL && n.payload) heard(n.payload);
    });
    try {
      await c.connect();
      await c.query(`LISTEN ${ORG_DELETED_CHANNEL}`);
      retryMs = RECONNECT_MIN_MS;
      await catchUp();
    } catch (err) {
      lost(err);
    }
  }

  await connect();
  return async () => {
    closed = true;
    if (timer) clearTimeout(timer);
    const c = client;
    client = null;
    await c?.end().catch(() => {});
  };
}
