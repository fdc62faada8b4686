import { mkdirSync } from 'node:fs';
import { PGlite } from '@electric-sql/pglite';
import { drizzle as drizzlePglite } from 'drizzle-orm/pglite';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import type { SQL } from 'drizzle-orm';
import pg from 'pg';
import * as schema from './schema.js';
import { createReadLane, type ReadLane } from './lane.js';

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
}

export async function openDatabase(opts: OpenOptions): Promise<Database> {
  if (opts.databaseUrl) {
    const pool = new pg.Pool({
      connectionString: opts.databaseUrl,
      max: opts.poolSize ?? 20,
      idleTimeoutMillis: 30_000,
      connectionTimeoutMillis: 5_000,
    });
    // An idle client losing its server must not crash the process; the next query reconnects.
    pool.on('error', () => {});
    const db = drizzlePg(pool, { schema }) as unknown as Db;
    const readLane = createReadLane({ pool });
    const close = async () => {
      await readLane.close();
      await pool.end();
    };
    return { db, kind: 'postgres', pool, pglite: undefined, readLane, close };
  }
  const dir = opts.dataDir ?? './data';
  if (!dir.startsWith('memory://')) mkdirSync(dir, { recursive: true });
  const client = await PGlite.create(dir);
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

/** Rows of a raw `db.execute(sql…)`, the same for both drivers. */
export async function queryRows<T>(db: Db, query: SQL): Promise<T[]> {
  const result = (await db.execute(query)) as unknown as { rows: T[] };
  return result.rows;
}
