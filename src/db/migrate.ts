import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrate as migratePg } from 'drizzle-orm/node-postgres/migrator';
import { migrate as migratePglite } from 'drizzle-orm/pglite/migrator';
import { drizzle as drizzlePg } from 'drizzle-orm/node-postgres';
import type { PgliteDatabase } from 'drizzle-orm/pglite';
import type { Database } from './client.js';

// The generated migrations (drizzle-kit, never hand-numbered) are applied at start-up and by
// `npm run migrate`. Both storage modes run the very same files.
export const migrationsFolder = fileURLToPath(new URL('../../migrations', import.meta.url)).replace(
  /\/dist\/migrations$/,
  '/migrations',
);

/** Arbitrary constant for pg_advisory_lock: two processes starting together migrate one at a time. */
const MIGRATION_LOCK = 724_110_301;

export async function runMigrations(database: Database): Promise<void> {
  if (database.kind === 'pglite') {
    await migratePglite(database.db as unknown as PgliteDatabase, { migrationsFolder });
    return;
  }
  // A connection of its own, without the pool's statement timeout: waiting for another process's
  // migration, or one long migration, is not a stuck request.
  const client = new pg.Client({ connectionString: database.pool!.options.connectionString });
  client.on('error', () => {}); // a lost connection fails the migration's statement, not the process
  await client.connect();
  try {
    await client.query('select pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await migratePg(drizzlePg(client), { migrationsFolder });
  } finally {
    await client.end().catch(() => {});
  }
}
