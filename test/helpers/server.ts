import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { loadConfig } from '../../src/config.js';
import { openDatabase, type Database } from '../../src/db/client.js';
import { runMigrations } from '../../src/db/migrate.js';
import { createDeps } from '../../src/create-deps.js';
import type { Deps } from '../../src/deps.js';
import { createLogger } from '../../src/log.js';
import { startServer } from '../../src/server.js';
import { randomToken } from '../../src/ids.js';
import { freePort } from './child-svc.js';
import { givePgliteBack, takePgliteDatabase } from './pglite-reuse.js';

// Each test file starts its own server on its own database: a fresh database on the real PostgreSQL
// when TEST_DATABASE_URL is set (CI sets it), otherwise an in-memory PGlite; either starts as a copy of
// the run's migrated one (global-setup.ts). Three loopback hosts
// stand for the three origins, so origin-dependent behaviour (issuers, links) is tested for real.

export interface TestServer {
  /** BASE_URL: the account API origin. */
  url: string;
  v2Url: string;
  lightUrl: string;
  port: number;
  deps: Deps;
  database: Database;
  /** A connection string for the test's own database (postgres mode only). */
  databaseUrl: string | undefined;
  close(): Promise<void>;
}

export const storageMode = (): 'postgres' | 'pglite' =>
  process.env.TEST_DATABASE_URL ? 'postgres' : 'pglite';

/**
 * Creates a database for one test file and returns its URL and how to drop it: empty, or with `migrated`
 * a copy of the run's migrated template (test/helpers/global-setup.ts) when there is one, which
 * `migrated` then says.
 */
export async function createTestDatabase(
  options: { migrated?: boolean } = {},
): Promise<{ url: string | undefined; migrated: boolean; drop(): Promise<void> }> {
  const admin = process.env.TEST_DATABASE_URL;
  if (!admin) return { url: undefined, migrated: false, drop: async () => {} };
  const name = `svc_t_${randomToken(8)}`;
  const template = options.migrated ? process.env.SVC_TEST_TEMPLATE_DATABASE : undefined;
  const client = new pg.Client({ connectionString: admin });
  await client.connect();
  await client.query(`create database "${name}"${template ? ` template "${template}"` : ''}`);
  await client.end();
  const url = new URL(admin);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    migrated: template !== undefined,
    async drop() {
      const c = new pg.Client({ connectionString: admin });
      await c.connect();
      await c.query(`drop database if exists "${name}" with (force)`);
      await c.end();
    },
  };
}

/**
 * The least a production start needs besides NODE_ENV (CONTRACT §1, src/production.ts): SMTP (a port
 * nothing listens on; sending fails quietly), a key-encryption key. The test origins are loopback http,
 * which production allows.
 */
export const PRODUCTION_ENV: Record<string, string> = {
  NODE_ENV: 'production',
  SMTP_URL: 'smtp://127.0.0.1:9',
  KEY_ENCRYPTION_KEY: 'test-only-key-encryption-key-0123456789',
};

export interface StartOptions {
  /** Configuration over the defaults; a function gets the port the server will listen on. */
  env?: Record<string, string> | ((port: number) => Record<string, string>);
  /** Reuse an existing database (a second process on the same data); migrations are not repeated. */
  databaseUrl?: string;
  /** Where the server's JSON log lines go (with LOG_LEVEL in `env`); default stdout. */
  log?: NodeJS.WritableStream;
}

/** The run's migrated PGlite data directory (global-setup.ts), read once per test process. */
let pgliteArchive: Promise<Blob> | undefined;
function migratedPglite(): Promise<Blob> | undefined {
  const path = process.env.SVC_TEST_PGLITE_ARCHIVE;
  if (!path) return undefined;
  pgliteArchive ??= readFile(path).then((bytes) => new Blob([bytes]));
  return pgliteArchive;
}

export async function startTestServer(options: StartOptions = {}): Promise<TestServer> {
  const owned = options.databaseUrl ? undefined : await createTestDatabase({ migrated: true });
  const databaseUrl = options.databaseUrl ?? owned?.url;
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const config = loadConfig({
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
      BASE_URL: `http://127.0.0.1:${port}`,
      V2_URL: `http://127.0.0.2:${port}`,
      LIGHT_URL: `http://127.0.0.3:${port}`,
      PORT: String(port),
      // Tests must not trip the per-address limit by accident; rate-limit tests set it explicitly.
      RATE_LIMIT_IP_PER_MIN: '100000',
      // Nor fence themselves: a process whose heartbeat has not landed for half of this admits no call
      // (503, src/models/slot/liveness.ts), and on a loaded test machine a beat can wait that long. The
      // tests of liveness set the default (4 s) explicitly.
      PROCESS_DEAD_AFTER_MS: '30000',
      ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
      DATA_DIR: 'memory://',
      ...(typeof options.env === 'function' ? options.env(port) : options.env),
    });
    const archive = databaseUrl ? undefined : await migratedPglite();
    const database = archive
      ? await takePgliteDatabase(archive)
      : await openDatabase({
          databaseUrl,
          dataDir: 'memory://',
          poolSize: 10,
          queryTimeoutMs: config.reliability.queryTimeoutMs,
        });
    // A copy of the run's migrated template or archive (global-setup.ts, made from the same migrations
    // in this run) has nothing to apply; checking it took a connection and a read of every migration.
    if (!archive && !owned?.migrated) await runMigrations(database);
    const deps = await createDeps(config, database, createLogger(config.logLevel, 'json', options.log));
    try {
      const running = await startServer(deps, ['127.0.0.1', '127.0.0.2', '127.0.0.3'], port);
      return {
        url: config.baseUrl,
        v2Url: config.v2Url,
        lightUrl: config.lightUrl,
        port,
        deps,
        database,
        databaseUrl,
        async close() {
          await running.close();
          await deps.close();
          await (database.pglite ? givePgliteBack(database) : database.close());
          await owned?.drop();
        },
      };
    } catch (err) {
      await deps.close();
      await (database.pglite ? givePgliteBack(database) : database.close());
      if ((err as { code?: string }).code !== 'EADDRINUSE' || attempt >= 5) throw err;
    }
  }
}
