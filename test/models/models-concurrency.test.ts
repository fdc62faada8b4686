import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import OpenAI from 'openai';
import fc from 'fast-check';
import { and, eq, sql } from 'drizzle-orm';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { billingEntries } from '../../src/db/schema.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { createPgLimiter, DEFAULT_SLOT_REUSE_MS } from '../../src/models/slot/concurrency.js';
import { leaseRows, waitForNoLeases } from '../helpers/leases.js';
import { createRedisLimiter } from '../../src/models/slot/concurrency-redis.js';
import { execFileSync } from 'node:child_process';
import { rejectionOf } from '../helpers/json.js';
import { eventually, eventuallyValue } from '../helpers/eventually.js';
import { Redis } from 'ioredis';
import { connect } from 'node:net';
import type { AppError } from '../../src/http/errors.js';
import { queryRows } from '../../src/db/client.js';

// The per-org concurrency cap (CONTRACT §9) with a slow fake provider: in one process, across two
// server processes on one PostgreSQL, and after a process holding leases is killed. Then the billing
// race: many parallel calls on a small allocation end on an exact balance that never went negative.

let fake: FakeUpstream;
let server: TestServer;
let owner: TestUser;
let key: string;

const sdk = (base = server.url) =>
  new OpenAI({ apiKey: key, baseURL: `${base}/v1`, maxRetries: 0, timeout: 20_000 });
const hi = (base?: string, extra: Record<string, unknown> = {}) =>
  sdk(base)
    .chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], ...extra })
    .then(
      () => 200,
      (e: InstanceType<typeof OpenAI.APIError>) =>
        e.status === 429 ? `429:${e.code}:${e.headers?.get('retry-after')}` : e.status,
    );

beforeAll(async () => {
  fake = await startFakeUpstream();
  server = await startTestServer({ env: fake.env({ ORG_MAX_CONCURRENCY: '2' }) });
  owner = await createUser(server);
  key = (await createApiToken(server, owner, owner.orgKey)).secret;
  await setOrgBalance(server, owner.orgKey, 100_000);
});

afterAll(async () => {
  await server?.close();
  await fake?.close();
});

/**
 * The calls' results, the provider holding its answers until each call has reached it or been answered
 * (a refusal at the cap), so that the calls admitted overlap however slowly they arrive.
 */
async function atTheCapThenReleased<T>(calls: Promise<T>[], release: () => void): Promise<T[]> {
  const before = fake.requests.length;
  let answered = 0;
  for (const c of calls) void c.finally(() => answered++);
  await eventually(
    () => fake.requests.length - before + answered >= calls.length,
    10_000,
    'each call at the provider or answered',
  );
  release();
  return Promise.all(calls);
}

describe('concurrency cap', () => {
  it('admits ORG_MAX_CONCURRENCY calls at once; the rest get 429 concurrency_limit with Retry-After', async () => {
    fake.maxInFlight = 0;
    const release = fake.holdAnswers();
    try {
      const results = await atTheCapThenReleased([hi(), hi(), hi(), hi()], release);
      expect(results.filter((r) => r === 200)).toHaveLength(2);
      expect(results.filter((r) => r !== 200)).toEqual([
        '429:concurrency_limit:1',
        '429:concurrency_limit:1',
      ]);
      expect(fake.maxInFlight).toBe(2);
      // Leases are released: the next call passes.
      expect(await hi()).toBe(200);
    } finally {
      release();
    }
  });

  it.runIf(storageMode() === 'postgres')(
    'holds across two server processes sharing one PostgreSQL',
    async () => {
      const second = await startTestServer({
        databaseUrl: server.databaseUrl!,
        env: fake.env({ ORG_MAX_CONCURRENCY: '2' }),
      });
      const release = fake.holdAnswers();
      try {
        const results = await atTheCapThenReleased(
          [hi(server.url), hi(second.url), hi(server.url), hi(second.url)],
          release,
        );
        expect(results.filter((r) => r === 200)).toHaveLength(2);
        expect(
          results.filter((r) => r !== 200).every((r) => String(r).startsWith('429:concurrency_limit')),
        ).toBe(true);
      } finally {
        release();
        await second.close();
      }
    },
  );

  it.runIf(storageMode() === 'postgres')('leases of a killed process expire', async () => {
    expect(await waitForNoLeases(server, owner.orgKey)).toBe(0); // both slots free for the child
    // A separate node process takes both slots with a 1 s lease TTL, then is killed with SIGKILL.
    const script = `
      import { openDatabase } from './src/db/client.ts';
      import { createPgLimiter } from './src/models/slot/concurrency.ts';
      const database = await openDatabase({ databaseUrl: process.env.DB });
      const limiter = createPgLimiter(database.db, { cap: 2, ttlMs: 1000 });
      await limiter.acquire(process.env.ORG, 'chat');
      await limiter.acquire(process.env.ORG, 'run');
      process.stdout.write('held\\n');
      setInterval(() => {}, 1000);`;
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: process.cwd(),
      env: { ...process.env, DB: server.databaseUrl!, ORG: owner.orgKey },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (d) => String(d).includes('held') && resolve());
      child.once('exit', (code) => reject(new Error(`child exited ${code}`)));
    });
    // Its leases stay live past their first TTL: the database's clock is past the expiry they were
    // taken with, and the child's heartbeat has moved every one of them later.
    const [taken] = await queryRows<{ at: Date }>(
      server.deps.db,
      sql`select max(expires_at) as at from concurrency_leases where org_id = ${owner.orgKey}`,
    );
    await eventually(
      async () => {
        const [row] = await queryRows<{ renewed: boolean }>(
          server.deps.db,
          sql`select now() > ${taken!.at} and min(expires_at) > ${taken!.at} as renewed
              from concurrency_leases where org_id = ${owner.orgKey}`,
        );
        return row!.renewed === true;
      },
      10_000,
      'the first TTL passed with the leases renewed',
    );
    expect(await hi()).toBe('429:concurrency_limit:1');
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    // The killed holder's leases lapse after their TTL; until then the cap answers 429.
    expect(await eventuallyValue(hi, (r) => r === 200, 4_000, "the dead holder's slots freed")).toBe(200);
  });

  it("a finished call's slot serves this process's next call without a new lease, and is freed after the reuse window", async () => {
    // The chat path: a call's lease is gone within a few reuse windows of its end.
    expect(await waitForNoLeases(server, owner.orgKey)).toBe(0);
    expect(await hi()).toBe(200);
    expect(await waitForNoLeases(server, owner.orgKey, DEFAULT_SLOT_REUSE_MS * 10)).toBe(0);
    // The reuse itself, on this database's limiter with a window no pause of a busy machine outlasts
    // (the default's 50 ms can pass between two calls of a test).
    const limiter = createPgLimiter(server.deps.db, { cap: 2, reuseMs: 60_000 });
    try {
      await (await limiter.acquire(owner.orgKey, 'chat')).release();
      const [parked] = await leaseRows(server, owner.orgKey);
      expect(parked).toBeDefined(); // still counted against the cap, for this process's next call
      await (await limiter.acquire(owner.orgKey, 'chat')).release();
      expect(await leaseRows(server, owner.orgKey)).toEqual([parked]); // the same row: no new lease was written
    } finally {
      await limiter.close();
    }
  });

  it('a limiter that stops beating (a dead holder) frees its slots after the TTL', async () => {
    expect(await waitForNoLeases(server, owner.orgKey)).toBe(0); // nothing left from the calls before
    const dead = createPgLimiter(server.deps.db, { cap: 2, ttlMs: 600 });
    await dead.acquire(owner.orgKey, 'chat');
    await dead.acquire(owner.orgKey, 'chat');
    await dead.close(); // stops the heartbeat without releasing: what a killed process leaves behind
    expect(await hi()).toBe('429:concurrency_limit:1');
    expect(await eventuallyValue(hi, (r) => r === 200, 4_000, "the dead limiter's slots freed")).toBe(200);
  });
});

describe('billing race', () => {
  let race: TestServer;
  let raceKey: string;
  let raceOrg: string;

  beforeAll(async () => {
    race = await startTestServer({ env: fake.env({ ORG_MAX_CONCURRENCY: '64' }) });
    const u = await createUser(race);
    raceOrg = u.orgKey;
    raceKey = (await createApiToken(race, u, u.orgKey)).secret;
  });
  afterAll(async () => {
    await race?.close();
  });

  it('many parallel calls on a small allocation: exact final balance, never negative', async () => {
    const client = new OpenAI({ apiKey: raceKey, baseURL: `${race.url}/v1`, maxRetries: 0 });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 400 }),
        fc.integer({ min: 4, max: 16 }),
        fc.integer({ min: 1, max: 12 }),
        async (start, calls, maxTokens) => {
          await setOrgBalance(race, raceOrg, start);
          const rowsBefore = (
            await race.deps.db
              .select()
              .from(billingEntries)
              .where(and(eq(billingEntries.orgKey, raceOrg), eq(billingEntries.type, 'usage')))
          ).length;
          let lowest = start;
          let sampling = true;
          const sampler = (async () => {
            while (sampling) {
              lowest = Math.min(lowest, await orgBalanceCredits(race.deps.db, raceOrg));
              await new Promise((r) => setTimeout(r, 5)); // the sampler's interval, not a wait for the calls
            }
          })();
          const statuses = await Promise.all(
            Array.from({ length: calls }, () =>
              client.chat.completions
                .create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], max_tokens: maxTokens })
                .then((r) => ({ ok: true as const, debit: 10 + 2 * r.usage!.completion_tokens }))
                .catch((e: InstanceType<typeof OpenAI.APIError>) => ({
                  ok: false as const,
                  status: e.status,
                })),
            ),
          );
          sampling = false;
          await sampler;
          expect(statuses.filter((s) => !s.ok).every((s) => !s.ok && s.status === 402)).toBe(true);
          const spent = statuses.reduce((sum, s) => sum + (s.ok ? s.debit : 0), 0);
          const final = await orgBalanceCredits(race.deps.db, raceOrg);
          expect(final).toBe(start - spent);
          expect(final).toBeGreaterThanOrEqual(0);
          expect(lowest).toBeGreaterThanOrEqual(0);
          const rows = await race.deps.db
            .select()
            .from(billingEntries)
            .where(and(eq(billingEntries.orgKey, raceOrg), eq(billingEntries.type, 'usage')));
          expect(rows.length - rowsBefore).toBe(statuses.filter((s) => s.ok).length);
          // No hold left behind.
          const held = await queryRows<{ h: number }>(
            race.deps.db,
            sql`select coalesce(sum(held), 0)::int as h from billing_accounts where id like ${'org:' + raceOrg + '%'}`,
          );
          expect(held[0]!.h).toBe(0);
        },
      ),
      { numRuns: 4 },
    );
  });
});

/** Whether something accepts TCP connections on 127.0.0.1:`port`. */
const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });

const hasRedis = (() => {
  try {
    execFileSync('redis-server', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

describe.runIf(hasRedis)('concurrency cap on Redis (REDIS_URL)', () => {
  it('caps, releases, and expires the leases of a holder that stopped beating', async () => {
    const port = 20_000 + Math.floor(Math.random() * 20_000);
    const redis = spawn('redis-server', ['--port', String(port), '--save', '', '--appendonly', 'no'], {
      stdio: 'ignore',
    });
    try {
      await eventually(() => accepts(port), 10_000, 'redis-server listening');
      const url = `redis://127.0.0.1:${port}`;
      const a = createRedisLimiter(url, { cap: 2, ttlMs: 600 });
      const b = createRedisLimiter(url, { cap: 2, ttlMs: 600 }); // a second process
      const l1 = await a.acquire('org1', 'chat');
      await b.acquire('org1', 'run');
      const refused = await rejectionOf<AppError>(a.acquire('org1', 'chat'));
      expect([refused.status, refused.code, refused.extra.headers?.['Retry-After']]).toEqual([
        429,
        'concurrency_limit',
        '1',
      ]);
      expect(await b.acquire('org2', 'chat')).toBeDefined(); // per organization
      await l1.release();
      await a.acquire('org1', 'chat');
      // Leases kept alive by heartbeats outlive their TTL: Redis's clock is past the expiry they were
      // taken with, and every one has been moved later...
      const reader = new Redis(url);
      try {
        const expiries = async () =>
          (await reader.zrange('svc:concurrency:org1', 0, -1, 'WITHSCORES'))
            .filter((_, i) => i % 2 === 1)
            .map(Number);
        const taken = Math.max(...(await expiries()));
        await eventually(
          async () => {
            const [seconds, micros] = await reader.time();
            const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
            const renewed = await expiries();
            return now > taken && renewed.length === 2 && Math.min(...renewed) > taken;
          },
          10_000,
          'the first TTL passed with the leases renewed',
        );
      } finally {
        reader.disconnect();
      }
      expect((await rejectionOf<AppError>(b.acquire('org1', 'chat'))).status).toBe(429);
      // ...and those of a holder that stopped beating (b, killed) expire.
      await b.close();
      await a.close();
      const c = createRedisLimiter(url, { cap: 2, ttlMs: 600 });
      let slots = 0;
      const takeBoth = async () => {
        while (slots < 2) {
          const refused = await c.acquire('org1', 'chat').then(
            () => false,
            () => true,
          );
          if (refused) return false;
          slots++;
        }
        return true;
      };
      await eventually(takeBoth, 5_000, 'both slots taken again after the TTL');
      await c.close();
    } finally {
      redis.kill('SIGKILL');
    }
  });
});
