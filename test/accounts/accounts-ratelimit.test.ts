import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { createUser } from '../helpers/fixtures.js';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { eventually } from '../helpers/eventually.js';
import { freePort } from '../helpers/child-svc.js';
import { queryRows } from '../../src/db/client.js';
import { sql } from 'drizzle-orm';
import { detailError, readJson } from '../helpers/json.js';

// Rate limits of CONTRACT §1 on the real store of each storage mode (PostgreSQL table or memory).

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

describe('failure limiters (CONTRACT §1)', () => {
  it('allows the policy budget, then refuses with 429 RATE_LIMITED and Retry-After, until reset', async () => {
    const limiter = server.deps.limits.loginFailures;
    const key = `budget-${Date.now()}@example.test`;
    for (let i = 0; i < 10; i++) {
      await limiter.check(key);
      await limiter.fail(key);
    }
    const err = await limiter.check(key).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ status: 429, code: 'RATE_LIMITED' });
    const retryAfter = Number(
      (err as { extra: { headers: Record<string, string> } }).extra.headers['Retry-After'],
    );
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(15 * 60);
    // A failure beyond the budget (a racing attempt that passed check) throws too.
    await expect(limiter.fail(key)).rejects.toMatchObject({ status: 429 });
    // Other identifiers are unaffected: limits are per identifier.
    await limiter.check(`other-${key}`);
    await limiter.reset(key);
    await limiter.check(key);
  });

  it('keeps policies apart: the same key in another policy has its own count', async () => {
    const key = 'usr_shared';
    for (let i = 0; i < 10; i++) await server.deps.limits.userCodeFailures.fail(key);
    await expect(server.deps.limits.userCodeFailures.check(key)).rejects.toMatchObject({ status: 429 });
    await server.deps.limits.twoFactorFailures.check(key);
  });

  it.runIf(storageMode() === 'postgres')(
    'stores counts in the shared rate_limits table, keyed by hash only',
    async () => {
      const email = `stored-${Date.now()}@example.test`;
      await server.deps.limits.loginFailures.fail(email);
      const rows = await queryRows<{ key: string; points: number }>(
        server.deps.db,
        sql`select key, points from rate_limits`,
      );
      expect(rows.length).toBeGreaterThan(0);
      expect(rows.some((r) => r.key.includes('@'))).toBe(false);
    },
  );
});

describe('per-address limit (CONTRACT §1: RATE_LIMIT_IP_PER_MIN)', () => {
  it('answers 429 RATE_LIMITED with Retry-After once an address passes its budget on sign-in routes', async () => {
    const small = await startTestServer({ env: { RATE_LIMIT_IP_PER_MIN: '3' } });
    try {
      const api = client(small.url);
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++)
        statuses.push((await api.post('/v1/login', { email: 'a@example.test', password: 'x' })).status);
      expect(statuses).not.toContain(429);
      const limited = await api.post('/v1/register', { email: 'b@example.test', name: 'B', password: 'x' });
      expect(limited.status).toBe(429);
      expect(readJson(detailError, limited.body).detail.code).toBe('RATE_LIMITED');
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
      // Routes outside the list are not counted.
      expect((await api.get('/healthz')).status).toBe(200);
    } finally {
      await small.close();
    }
  });
});

/** Ten wrong passwords for `email` on one server. */
async function failTenTimes(url: string, email: string) {
  for (let i = 0; i < 10; i++)
    expect((await client(url).post('/v1/login', { email, password: 'Wrong-password-1' })).status).toBe(401);
}

describe('stores shared by several processes (CONTRACT §1)', () => {
  it.runIf(storageMode() === 'postgres')(
    'two processes on one PostgreSQL database share failure counts',
    async () => {
      const second = await startTestServer({ databaseUrl: server.databaseUrl! });
      try {
        const user = await createUser(server);
        await failTenTimes(server.url, user.email);
        const res = await client(second.url).post('/v1/login', {
          email: user.email,
          password: user.password,
        });
        expect(res.status).toBe(429);
        expect(readJson(detailError, res.body).detail.code).toBe('RATE_LIMITED');
      } finally {
        await second.close();
      }
    },
  );

  const redisBinary = spawnSync('redis-server', ['--version']).status === 0;
  it.runIf(redisBinary)(
    'uses Redis when REDIS_URL is set, and falls back to per-process limits when Redis is down',
    async () => {
      // A port no one listens on (a random one could be another test's server, which would hold the
      // probe's PING unanswered).
      const port = await freePort();
      const redisProcess: ChildProcess = spawn(
        'redis-server',
        ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
        {
          stdio: 'ignore',
        },
      );
      const probe = new Redis({
        port,
        host: '127.0.0.1',
        lazyConnect: true,
        maxRetriesPerRequest: 0,
        commandTimeout: 1_000,
        retryStrategy: () => 50,
      });
      probe.on('error', () => {}); // refused connections are expected while it starts and after the kill
      const servers: TestServer[] = [];
      try {
        await eventually(
          () =>
            probe.ping().then(
              () => true,
              () => false,
            ),
          10_000,
          'redis-server answering',
        );
        const env = { REDIS_URL: `redis://127.0.0.1:${port}` };
        servers.push(await startTestServer({ env }));
        if (storageMode() === 'postgres')
          servers.push(await startTestServer({ env, databaseUrl: servers[0]!.databaseUrl! }));
        const [a, b = a] = servers as [TestServer, TestServer?];
        const user = await createUser(a);
        await failTenTimes(a.url, user.email);
        const limited = await client(b.url).post('/v1/login', {
          email: user.email,
          password: user.password,
        });
        expect(limited.status).toBe(429);
        const keys = await probe.keys('svc:rl:login*');
        expect(keys.length).toBe(1);
        expect(keys[0]).not.toContain('@');

        // Redis goes away: sign-in still answers (401 for a wrong password, 200 for the right one), never 500.
        redisProcess.kill('SIGKILL');
        await new Promise((r) => redisProcess.once('exit', r));
        const other = await createUser(a);
        expect(
          (await client(a.url).post('/v1/login', { email: other.email, password: 'Wrong-password-1' }))
            .status,
        ).toBe(401);
        expect(
          (await client(a.url).post('/v1/login', { email: other.email, password: other.password })).status,
        ).toBe(200);
      } finally {
        probe.disconnect();
        redisProcess.kill('SIGKILL');
        for (const s of servers) await s.close();
      }
    },
    // A redis-server and two test servers started, a dozen sign-ins hashed: on a busy two-core machine
    // that can take over 30 s.
    90_000,
  );
});
