import { mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { sql, type SQL } from 'drizzle-orm';
import pg from 'pg';
import * as schema from './schema.js';
import { createReadLane, type ReadLane } from './lane.js';
import { cutConnection } from './cut.js';
import { traceCheckouts, traceStatements } from './statement-spans.js';
import { DEFAULT_POOL_SIZE } from './pool-size.js';

/** A drizzle database or a transaction of one: queries take this as their first argument. */
export type Db = PgDatabase<PgQueryResultHKT, typeof schema>;

export interface Database {
  db: Db;
  kind: 'postgres' | 'pglite';
  /** The node-postgres pool when kind is postgres (used by stores that speak pg directly). */
  pool: pg.Pool | undefined;
  /** The embedded engine when kind is pglite. */
  pglite: PGlite | undefined;
  /** A connection of its own for the `svc_` token read every model call makes first (src/db/lane.ts). */
  readLane: ReadLane;
  /** Ends the pool and the read lane (or the embedded engine). */
  close(): Promise<void>;
}

// Integers come back as numbers: every bigint this schema stores (token amounts, steps) is far below 2^53.
pg.types.setTypeParser(20, (v) => Number.parseInt(v, 10));

export interface OpenOptions {
  databaseUrl?: string | undefined;
  /** PGlite data directory; `memory://` for a throw-away database (tests). */
  dataDir?: string | undefined;
  poolSize?: number;
  /**
   * Bound on every statement (DATABASE_QUERY_TIMEOUT_MS): PostgreSQL cancels a statement running longer
   * (`statement_timeout`), and the driver gives up on an answer that does not come a second later
   * (`query_timeout`: a black-holed connection never answers, so only the client side can notice).
   * 0 turns both off.
   */
  queryTimeoutMs?: number;
  /**
   * PGlite only: start from this dumped data directory (`PGlite.dumpDataDir()`) instead of an empty one.
   * The tests start each file's database from one migrated once per run (test/helpers/global-setup.ts).
   */
  pgliteDataDirArchive?: Blob | undefined;
}

/** What DATABASE_QUERY_TIMEOUT_MS defaults to (docs/operations.md). */
export const DEFAULT_QUERY_TIMEOUT_MS = 5_000;
/** The driver waits this much longer than the server's own statement timeout before it gives up. */
const CLIENT_TIMEOUT_MARGIN_MS = 1_000;

/**
 * A pool client that never crashes the process and never stays stuck (STYLE: Faults).
 *
 * pg-pool listens for `'error'` only while a client is idle: one checked out (a drizzle transaction, the
 * hold sweep, a webhook) whose socket broke emitted an unhandled `'error'` and the process exited. The
 * failure already reaches the statement in flight, and the pool drops the client when it
 * is released (it is no longer queryable); the listener only keeps the event from ending the process.
 *
 * A statement whose answer never came (the driver's `query_timeout`: a black-holed connection) leaves the
 * connection waiting for it, and every later statement on it (the transaction's ROLLBACK first) would
 * queue behind. So a statement that failed without an error from PostgreSQL while the connection still
 * waits cuts the connection: the rest fail at once and the pool opens a fresh one.
 */
class OutageSafeClient extends pg.Client {
  constructor(config?: pg.ClientConfig) {
    super(config);
    this.on('error', () => {});
    traceStatements(this);
    const query = this.query.bind(this) as (...args: unknown[]) => unknown;
    (this as unknown as { query: typeof query }).query = (...args) => {
      const result = query(...args);
      if (result instanceof Promise)
        result.catch((err: unknown) => {
          if (!(err instanceof pg.DatabaseError) && waitingOnAnswer(this)) cutConnection(this);
        });
      return result;
    };
  }
}

/** pg's own marker of a client with a statement still waiting for its answer (no public getter). */
const waitingOnAnswer = (client: pg.ClientBase) =>
  (client as unknown as { _getActiveQuery(): unknown })._getActiveQuery() != null;

export async function openDatabase(opts: OpenOptions): Promise<Database> {
  if (opts.databaseUrl) {
    const timeoutMs = opts.queryTimeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS;
    const pool = new pg.Pool({
      connectionString: opts.databaseUrl,
      max: opts.poolSize ?? DEFAULT_POOL_SIZE,
      // A connection once opened is kept (decision 0171): a fresh one runs each PL/pgSQL function's first
      // call cold, and after a pause the calls queued behind those first ones.
      min: opts.poolSize ?? DEFAULT_POOL_SIZE,
      idleTimeoutMillis: 30_000,
      // Connecting is bounded like a statement: a black-holed database must not hold a request longer.
      connectionTimeoutMillis: timeoutMs > 0 ? Math.min(5_000, timeoutMs + CLIENT_TIMEOUT_MARGIN_MS) : 5_000,
      Client: OutageSafeClient,
      ...(timeoutMs > 0
        ? { statement_timeout: timeoutMs, query_timeout: timeoutMs + CLIENT_TIMEOUT_MARGIN_MS }
        : {}),
      // A peer that vanished without a reset is noticed by the kernel too, not only by a timeout.
      keepAlive: true,
      keepAliveInitialDelayMillis: 10_000,
    });
    // An idle client losing its server must not crash the process; the next query reconnects.
    pool.on('error', () => {});
    traceCheckouts(pool);
    // A client given back while a statement still waits for its answer (the driver gave up on it: a
    // black-holed connection) would make every later statement queue behind that one. Its socket is cut,
    // so that the pool drops it and the next checkout opens a fresh connection.
    pool.on('release', (_err: Error | undefined, client: pg.PoolClient) => {
      if (waitingOnAnswer(client)) cutConnection(client);
    });
    const db = drizzlePg(pool, { schema }) as unknown as Db;
    pools.set(db, pool);
    const readLane = createReadLane({ pool });
    const close = async () => {
      await readLane.close();
      await pool.end();
    };
    return { db, kind: 'postgres', pool, pglite: undefined, readLane, close };
  }
  const dir = opts.dataDir ?? './data';
  if (!dir.startsWith('memory://')) mkdirSync(dir, { recursive: true });
  const client = await PGlite.create(
    dir,
    opts.pgliteDataDirArchive ? { loadDataDir: opts.pgliteDataDirArchive } : undefined,
  );
  const db = drizzlePglite(client, { schema }) as unknown as Db;
  return {
    db,
    kind: 'pglite',
    pool: undefined,
    pglite: client,
    readLane: createReadLane({ pglite: client }),
    close: () => client.close(),
  };
}

/** The pool behind each PostgreSQL database openDatabase made (not its transactions): see namedRows. */
const pools = new WeakMap<Db, pg.Pool>();

/**
 * `… and ${ASYNC_COMMIT} = 'off'` in a statement's condition commits its transaction without waiting for
 * the WAL flush: `set_config('synchronous_commit', 'off', true)` in the statement itself scopes it to the
 * statement's own transaction (one round trip, no BEGIN/COMMIT). For writes of temporary state only, which
 * a database crash may forget (decision 0018).
 */
export const ASYNC_COMMIT = `(select set_config('synchronous_commit', 'off', true))`;

/** Rows of a raw `db.execute(sql…)`, the same for both drivers. */
export async function queryRows<T>(db: Db, query: SQL): Promise<T[]> {
  const result: unknown = await db.execute(query);
  return (result as { rows: T[] }).rows;
}

/**
 * Rows of a statement written with `$n` placeholders for `values`. On a PostgreSQL database (not a
 * transaction of one) it runs as a named statement, prepared once per pooled connection, so that its later
 * runs skip the parse and the plan: for the settle every model call makes, 0.2–0.3 ms of its round trip
 * and 70–170 µs of PostgreSQL's CPU (docs/decisions/0014-named-prepared-statements.md). Elsewhere (a transaction, PGlite) it
 * runs as an ordinary statement. `text` must be the same for every run under one `name`.
 */
export async function namedRows<T>(db: Db, name: string, text: string, values: unknown[]): Promise<T[]> {
  const pool = pools.get(db);
  if (pool) return (await pool.query({ name, text, values })).rows as T[];
  return queryRows<T>(db, withParams(text, values));
}

/** `text` with each `$n` bound to values[n - 1], as a drizzle statement. */
function withParams(text: string, values: unknown[]): SQL {
  const parts = text.split(/\$(\d+)/);
  return sql.join(
    parts.map((part, i) => (i % 2 === 1 ? sql`${sql.param(values[Number(part) - 1])}` : sql.raw(part))),
  );
}
