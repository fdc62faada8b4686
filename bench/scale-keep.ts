import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { migrationsFolder } from '../src/db/migrate.js';

// A kept scale database (BENCH_SCALE_DATABASE, bench/scale.ts) outlives the migrations it was made with:
// until the first release `npm run db:generate` regenerates them whole (scripts/db-generate.sh), so the
// migrator would run the new init migration again on it and stop at the first table that exists. Before
// the kept database is served, each migration it has not recorded is applied statement by statement,
// skipping what exists already (a table, index, constraint or trigger of the same name), and recorded as
// drizzle's migrator records it (hash of the file, its journal time). So a new index or table reaches the
// kept database in minutes instead of a reseed of most of an hour. A changed column or constraint of the
// same name is not applied: reseed then (drop the database).

/** What the database already has: a relation, object, column or schema of that name. */
const EXISTS = new Set(['42P07', '42710', '42701', '42P06']);

interface Journal {
  entries: { tag: string; when: number }[];
}

/** Applies and records the migrations the kept database has not recorded; returns what it did. */
export async function adoptMigrations(databaseUrl: string): Promise<string[]> {
  const journal = JSON.parse(readFileSync(join(migrationsFolder, 'meta/_journal.json'), 'utf8')) as Journal;
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  const done: string[] = [];
  try {
    const table = await c.query(`select to_regclass('drizzle.__drizzle_migrations') as t`);
    if (!(table.rows[0] as { t: string | null }).t) return done; // a new database: the migrator makes it
    const rows = (
      await c.query<{ hash: string; created_at: string }>(
        'select hash, created_at from drizzle.__drizzle_migrations',
      )
    ).rows;
    const known = new Set(rows.map((r) => r.hash));
    const recorded = new Set(rows.map((r) => `${r.hash}@${r.created_at}`));
    for (const entry of journal.entries) {
      const text = readFileSync(join(migrationsFolder, `${entry.tag}.sql`), 'utf8');
      const hash = createHash('sha256').update(text).digest('hex');
      if (recorded.has(`${hash}@${entry.when}`)) continue;
      // The migrator runs every migration newer than the newest recorded: a file applied before under
      // an older journal time (regenerated, unchanged) is recorded again under its new time.
      if (known.has(hash)) {
        await c.query('insert into drizzle.__drizzle_migrations (hash, created_at) values ($1, $2)', [
          hash,
          entry.when,
        ]);
        continue;
      }
      let applied = 0;
      let existed = 0;
      for (const statement of text.split('--> statement-breakpoint')) {
        if (!statement.trim()) continue;
        await c.query('begin');
        try {
          await c.query(statement);
          await c.query('commit');
          applied++;
        } catch (err) {
          await c.query('rollback');
          if (!EXISTS.has((err as { code?: string }).code ?? '')) throw err;
          existed++;
        }
      }
      await c.query('insert into drizzle.__drizzle_migrations (hash, created_at) values ($1, $2)', [
        hash,
        entry.when,
      ]);
      done.push(`${entry.tag}: ${applied} statements applied, ${existed} there already`);
    }
    return done;
  } finally {
    await c.end();
  }
}

// The big side's database when it is kept between runs (BENCH_SCALE_DATABASE, a database name on the
// admin URL's server): created and seeded by the first run, reused as it is by later runs, never
// dropped. Seeding 10M ledger rows takes most of an hour on a loaded machine; a kept database lets a
// change (an index, a query) be measured again in minutes. The measured person is stored beside the
// seed (table `bench_scale_seed`, outside svc's schema), and each run signs them in afresh.

export function databaseUrlNamed(admin: string, name: string): string {
  const url = new URL(admin);
  url.pathname = `/${name}`;
  return url.toString();
}

/** Creates the kept database when it does not exist yet; returns its URL. */
export async function keptDatabase(adminUrl: string, name: string): Promise<string> {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error('BENCH_SCALE_DATABASE: a plain lower-case name');
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    const found = await admin.query('select 1 from pg_database where datname = $1', [name]);
    if (found.rowCount === 0) await admin.query(`create database "${name}"`);
  } finally {
    await admin.end();
  }
  return databaseUrlNamed(adminUrl, name);
}

export interface Measured {
  userId: string;
  orgKey: string;
  clientId: string;
}

/** The seed stored in a kept database (null: not seeded yet, or the seed did not finish). */
export async function storedSeed(
  databaseUrl: string,
): Promise<{ measured: Measured; counts: unknown } | null> {
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    await c.query(`create table if not exists bench_scale_seed (
      id int primary key check (id = 1), measured jsonb not null, counts jsonb not null,
      seconds numeric not null, seeded_at timestamptz not null default now())`);
    const r = await c.query<{ measured: Measured; counts: unknown }>(
      'select measured, counts from bench_scale_seed',
    );
    return r.rows[0] ?? null;
  } finally {
    await c.end();
  }
}
