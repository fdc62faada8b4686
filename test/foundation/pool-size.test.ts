import { spawn } from 'node:child_process';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  allowedConnections,
  CONNECTIONS_BESIDE_POOL,
  DEFAULT_POOL_SIZE,
  MIN_POOL_SIZE,
  poolPlan,
} from '../../src/db/pool-size.js';
import { createTestDatabase } from '../helpers/server.js';
import { nodeEntry } from '../helpers/entry.js';

// Each process's PostgreSQL pool fits the server's max_connections (src/db/pool-size.ts,
// docs/deploying.md "Every core"): the default shrinks to fit, a setting is kept, and a start that
// cannot fit refuses with exit 2, naming the variables.

describe('poolPlan', () => {
  it('keeps the default pool while every process fits', () => {
    expect(poolPlan({ processes: 4, allowed: 97 })).toEqual({ size: DEFAULT_POOL_SIZE });
  });

  it('shrinks the default to fit, down to MIN_POOL_SIZE, and refuses below', () => {
    // 8 × (20 + 2) = 176 > 97: 97 / 8 = 12 per process, less the two beside the pool.
    const fitted = poolPlan({ processes: 8, allowed: 97 });
    expect(fitted).toMatchObject({ size: 12 - CONNECTIONS_BESIDE_POOL });
    expect('note' in fitted && fitted.note).toMatch(/10 connections/);
    expect(poolPlan({ processes: 16, allowed: 97 })).toMatchObject({ size: MIN_POOL_SIZE });
    const refused = poolPlan({ processes: 17, allowed: 97 });
    expect('refused' in refused && refused.refused).toMatch(
      /^WEB_CONCURRENCY: 17 processes need at least 102/,
    );
  });

  it('keeps a DATABASE_POOL_SIZE as set, with a note when it exceeds what the server allows', () => {
    expect(poolPlan({ processes: 2, allowed: 97, requested: 40 })).toEqual({ size: 40 });
    const over = poolPlan({ processes: 4, allowed: 97, requested: 40 });
    expect(over).toMatchObject({ size: 40 });
    expect('note' in over && over.note).toMatch(/168 connections, more than the 97/);
  });
});

describe.skipIf(!process.env.TEST_DATABASE_URL)('on PostgreSQL', { timeout: 120_000 }, () => {
  let database: Awaited<ReturnType<typeof createTestDatabase>>;
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    await database?.drop();
  });

  it("reads what the server allows ordinary roles: max_connections less the superusers' reserve", async () => {
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    const setting = async (name: string) =>
      Number((await client.query<{ v: string }>(`select current_setting('${name}') as v`)).rows[0]!.v);
    const expected = (await setting('max_connections')) - (await setting('superuser_reserved_connections'));
    await client.end();
    expect(await allowedConnections(database.url!)).toBe(expected);
  });

  it('a start whose workers cannot fit refuses with exit 2, naming the variables', async () => {
    const child = spawn(process.execPath, nodeEntry('src/main.ts'), {
      env: {
        PATH: process.env.PATH ?? '',
        LOG_LEVEL: 'warn',
        PORT: '0',
        DATABASE_URL: database.url,
        WEB_CONCURRENCY: '64',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code, stderr).toBe(2);
    expect(stderr).toMatch(/WEB_CONCURRENCY: 64 processes need at least 384 PostgreSQL connections/);
    expect(stderr).toMatch(/DATABASE_POOL_SIZE/);
    expect(stdout).not.toContain('svc is running');
  });
});
