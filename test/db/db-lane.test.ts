import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { listProjects } from '../../src/projects/service.js';
import { createUser } from '../helpers/fixtures.js';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';

// The read lane (src/db/lane.ts): statements prepared once, rows as arrays. On PGlite it shares the
// engine with the ORM, so it must read with the engine's types and never inside another caller's
// transaction.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
  await server.deps.db.execute(sql`create table lane_probe (v int, at timestamptz, tags text[])`);
});
afterAll(async () => {
  await server?.close();
});

describe('read lane', () => {
  it('reads rows as arrays with the driver types; a failed statement fails only its own read', async () => {
    const lane = server.database.readLane;
    const at = new Date('2026-01-02T03:04:05.678Z');
    const [row] = await lane.rows(
      'test_lane_types',
      'select $1::int + 1, $2::timestamptz, $3::text[], $4::text is null, true',
      [41, at, ['a', 'b "c"'], null],
    );
    expect(row).toEqual([42, at, ['a', 'b "c"'], true, true]);
    await expect(lane.rows('test_lane_fails', 'select 1 / $1::int', [0])).rejects.toThrow(/division by zero/);
    expect(await lane.rows('test_lane_fails', 'select 1 / $1::int', [1])).toEqual([[1]]);
    expect(await lane.pooledRows('test_lane_pooled', 'select $1::text', ['x'])).toEqual([['x']]);
  });

  it('never reads inside a transaction in progress (it sees neither its rows nor its rollback)', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let inserted!: () => void;
    const hasInserted = new Promise<void>((r) => (inserted = r));
    const tx = server.deps.db
      .transaction(async (t) => {
        await t.execute(sql`insert into lane_probe (v) values (1)`);
        inserted();
        await gate;
        throw new Error('roll back');
      })
      .catch(() => 'rolled back');
    await hasInserted;
    const read = server.database.readLane.rows('test_lane_probe', 'select count(*)::int from lane_probe', []);
    if (storageMode() === 'postgres') {
      // On PostgreSQL it runs on a connection of its own, while the transaction is still open.
      expect(await read).toEqual([[0]]);
    }
    // On PGlite (one connection) it waits for the transaction's end: a read that slipped inside it would
    // have counted the inserted row, so the count of 0 after the rollback is the proof.
    release();
    expect(await tx).toBe('rolled back');
    expect(await read).toEqual([[0]]);
  });

  it.runIf(storageMode() === 'pglite')(
    'on PGlite, prepares each statement once (the project list among them)',
    async () => {
      const user = await createUser(server);
      for (let i = 0; i < 3; i++) {
        await listProjects(
          server.database,
          { userId: user.userId },
          { orgKey: user.orgKey, limit: 20, offset: 0 },
        );
      }
      const rows = await server.database.readLane.rows(
        'test_lane_prepared',
        `select name, generic_plans + custom_plans from pg_prepared_statements where name = 'projects_org_page'`,
        [],
      );
      expect(rows).toEqual([['projects_org_page', 3]]);
    },
  );
});
