import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { openDatabase } from '../../src/db/client.js';
import { runMigrations } from '../../src/db/migrate.js';
import { randomToken } from '../../src/ids.js';
import { isBuilt } from '../../scripts/ensure-built.mjs';

// vitest's globalSetup (vitest.config.ts): the migrations run once per run, and every test file's
// database starts from that migrated one instead of migrating an empty one again (test/helpers/server.ts).
// Each of ~110 test servers saved, on this 2-core machine: PGlite's initdb and migrations (~2.6 of its
// ~3.5 CPU-seconds to start: an archive loads in ~0.9), and on PostgreSQL ~2.5 s of a fresh database's
// migrations (CREATE DATABASE … TEMPLATE copies the migrated one in ~0.3 s). Made at every run from the
// checkout's migrations/, so it is never older than they are; the migrations still run on an empty
// database here, and in every child svc started on a database of its own (test/production-start).
//
// PGlite: the migrated data directory, dumped to a file named by SVC_TEST_PGLITE_ARCHIVE.
// PostgreSQL: a migrated database named by SVC_TEST_TEMPLATE_DATABASE.
// Both variables reach the test workers and their children through the environment.

// The child processes tests start (svc's entry point, the CLI: test/helpers/entry.ts) run dist/ with
// plain node when it is as new as every source, else the source through tsx, which compiles at every
// spawn. On a checkout with no build (a fresh clone), building once here costs one compile and saves it
// on every spawn after: test/foundation/production-start 59.6 → 44.4 CPU-s, test/cli/cli-errors 31.0 →
// 26.1. It emits without type-checking (`--noCheck`: the same files, in 11 CPU-seconds and 8 s instead of
// 35 and 25), as tsx and the test runner do; `npm run typecheck` and CI check the types.
// A build that fails changes nothing: the children then run the source.
function buildChildEntries(): void {
  if (isBuilt('dist/src/main.js') && isBuilt('dist/src/cli/cli.js')) return;
  const tsc = join(import.meta.dirname, '../../node_modules/typescript/bin/tsc');
  spawnSync(
    process.execPath,
    [tsc, '-p', join(import.meta.dirname, '../../tsconfig.build.json'), '--noCheck'],
    { stdio: 'ignore' },
  );
}

export async function setup(): Promise<() => Promise<void>> {
  buildChildEntries();
  const admin = process.env.TEST_DATABASE_URL;
  if (admin) {
    const name = `svc_template_${randomToken(8)}`;
    const url = new URL(admin);
    url.pathname = `/${name}`;
    await adminQuery(admin, `create database "${name}"`);
    const database = await openDatabase({ databaseUrl: url.toString(), poolSize: 1 });
    try {
      await runMigrations(database);
    } finally {
      // CREATE DATABASE … TEMPLATE refuses a template anyone is connected to.
      await database.close();
    }
    process.env.SVC_TEST_TEMPLATE_DATABASE = name;
    return async () => {
      delete process.env.SVC_TEST_TEMPLATE_DATABASE;
      await adminQuery(admin, `drop database if exists "${name}" with (force)`);
    };
  }
  const dir = await mkdtemp(join(tmpdir(), 'svc-test-pglite-'));
  const archive = join(dir, 'migrated.tar');
  const database = await openDatabase({ dataDir: 'memory://' });
  try {
    await runMigrations(database);
    const dump = await database.pglite!.dumpDataDir('none');
    await writeFile(archive, Buffer.from(await dump.arrayBuffer()));
  } finally {
    await database.close();
  }
  process.env.SVC_TEST_PGLITE_ARCHIVE = archive;
  return async () => {
    delete process.env.SVC_TEST_PGLITE_ARCHIVE;
    await rm(dir, { recursive: true, force: true });
  };
}

async function adminQuery(admin: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: admin });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}
