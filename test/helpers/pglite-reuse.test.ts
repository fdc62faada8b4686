import { readFile } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
import { describe, expect, it } from 'vitest';
import { createApiToken, createUser } from './fixtures.js';
import { givePgliteBack, takePgliteDatabase } from './pglite-reuse.js';
import { startTestServer, storageMode } from './server.js';

// A PGlite engine a closed test server gave back (./pglite-reuse.ts) holds exactly what a fresh copy of
// the run's migrated database holds, with none of the last file's session state.

/** Every table's rows and every sequence's position, as one comparable value. */
async function contents(engine: PGlite): Promise<Record<string, string>> {
  const tables = await engine.query<{ name: string }>(
    `select c.oid::regclass::text as name from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where c.relkind = 'r' and n.nspname <> 'information_schema' and n.nspname not like 'pg\\_%'`,
  );
  const found: Record<string, string> = {};
  for (const { name } of tables.rows) {
    const rows = await engine.query<{ rows: string }>(
      `select coalesce(json_agg(t order by t::text)::text, '') as rows from only ${name} t`,
    );
    found[name] = rows.rows[0]!.rows;
  }
  const sequences = await engine.query<{ name: string; value: string }>(
    `select sequencename as name, coalesce(last_value::text, 'unused') as value from pg_sequences`,
  );
  for (const s of sequences.rows) found[`sequence ${s.name}`] = s.value;
  return found;
}

describe.skipIf(storageMode() !== 'pglite')('a reused PGlite test database', () => {
  it('is the migrated copy again, with no rows, sequences or session state of the last server', async () => {
    const first = await startTestServer();
    const engine = first.database.pglite!;
    const user = await createUser(first);
    await createApiToken(first, user, user.orgKey);
    await engine.exec(`select pg_advisory_lock(4242); set statement_timeout = 1234`);
    const used = await contents(engine);
    await first.close();

    const archive = new Blob([await readFile(process.env.SVC_TEST_PGLITE_ARCHIVE!)]);
    const again = await takePgliteDatabase(archive);
    expect(again.pglite, 'the engine was reused').toBe(engine);
    const fresh = await PGlite.create('memory://', { loadDataDir: archive });
    const expected = await contents(fresh);
    await fresh.close();
    expect(used, 'the first server wrote rows').not.toEqual(expected);
    expect(await contents(engine)).toEqual(expected);
    expect(await engine.query(`select 1 from pg_locks where locktype = 'advisory'`)).toMatchObject({
      rows: [],
    });
    expect((await engine.query('show statement_timeout')).rows).toEqual([{ statement_timeout: '0' }]);
    await givePgliteBack(again);

    // A server on it works: its named statements are prepared again, a sign-up of the same e-mail succeeds.
    const second = await startTestServer();
    try {
      expect(second.database.pglite).toBe(engine);
      await createUser(second, { email: user.email });
    } finally {
      await second.close();
    }
  });

  it('is not reused once a test changed its schema', async () => {
    const first = await startTestServer();
    const engine = first.database.pglite!;
    await engine.exec('create table made_by_a_test (id int)');
    await first.close();
    const second = await startTestServer();
    try {
      expect(second.database.pglite).not.toBe(engine);
      expect(engine.closed).toBe(true);
    } finally {
      await second.close();
    }
  });
});
