import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { sql } from 'drizzle-orm';
import { Redis } from 'ioredis';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { ageDatabaseWindow } from '../helpers/rate-windows.js';
import { openDatabase, queryRows, type Database } from '../../src/db/client.js';
import { createLogger } from '../../src/log.js';
import { randomToken } from '../../src/ids.js';
import { createPostgresWindows } from '../../src/ratelimit/rolling-window-postgres.js';
import { createRedisWindows } from '../../src/ratelimit/rolling-window-redis.js';
import { WINDOW_MS, type RollingWindows, type WindowCount } from '../../src/ratelimit/rolling-window.js';

// The rolling windows of the RPM and TPM limits (CONTRACT §11; decision 0065), on each store: the
// database (PGlite, or PostgreSQL with TEST_DATABASE_URL) and Redis on 127.0.0.1:6379. Two handles on one
// store stand for two processes (two pools, two Redis connections). The window's age is moved by
// backdating entries in the store, so what a minute later looks like is checked without waiting a minute.

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const redisAnswers =
  spawnSync('redis-cli', ['-u', REDIS_URL, 'ping'], { encoding: 'utf8' }).stdout?.trim() === 'PONG';
const log = createLogger('silent');

interface Store {
  /** Two handles on the one store, as two processes would have. */
  a: RollingWindows;
  b: RollingWindows;
  /** Moves every entry of `key` `ms` into the past. */
  age(key: string, ms: number): Promise<void>;
  /** The amounts the store holds for `key`. */
  amounts(key: string): Promise<number[]>;
  /** The running total the store keeps for `key` (0 when it keeps none). */
  total(key: string): Promise<number>;
  /** Removes entries that left the window for keys no admission comes back to (the database's sweep). */
  sweep(): Promise<void>;
  close(): Promise<void>;
}

let server: TestServer;
let second: Database | undefined;
beforeAll(async () => {
  server = await startTestServer();
  if (storageMode() === 'postgres') second = await openDatabase({ databaseUrl: server.databaseUrl! });
});
afterAll(async () => {
  await second?.close();
  await server?.close();
});

const databaseStore = (): Store => ({
  a: createPostgresWindows(server.deps.db, log),
  b: createPostgresWindows((second ?? server.database).db, log),
  age: (key, ms) => ageDatabaseWindow(server.deps.db, key, ms),
  async amounts(key) {
    const rows = await queryRows<{ amount: number }>(
      server.deps.db,
      sql`select amount from rate_window_entries where key = ${key} order by id`,
    );
    return rows.map((r) => Number(r.amount));
  },
  async total(key) {
    const [row] = await queryRows<{ used: number }>(
      server.deps.db,
      sql`select used from rate_window_totals where key = ${key}`,
    );
    return Number(row?.used ?? 0);
  },
  async sweep() {
    await queryRows(server.deps.db, sql`select svc_rate_sweep(${WINDOW_MS}::int)`);
  },
  async close() {},
});

function redisStore(): Store {
  const one = new Redis(REDIS_URL);
  const two = new Redis(REDIS_URL);
  return {
    a: createRedisWindows(one),
    b: createRedisWindows(two),
    async age(key, ms) {
      const members = await one.zrange(`svc:rate:${key}`, 0, -1);
      for (const m of members) await one.zincrby(`svc:rate:${key}`, -ms, m);
    },
    async amounts(key) {
      const members = await one.zrange(`svc:rate:${key}`, 0, -1);
      return members.map((m) => Number(m.split(':').pop()));
    },
    async total(key) {
      return Number((await one.get(`svc:rate:${key}:sum`)) ?? 0);
    },
    async sweep() {},
    async close() {
      await Promise.all([one.quit(), two.quit()]);
    },
  };
}

const stores: [string, () => Store, boolean][] = [
  [`database (${storageMode()})`, databaseStore, true],
  ['redis', redisStore, redisAnswers],
];

describe.each(stores)('rolling windows on %s', (_name, make, available) => {
  let store: Store;
  beforeAll(() => {
    if (available) store = make();
  });
  afterAll(async () => {
    await store?.close();
  });
  const key = (what: string) => `test:${what}:${randomToken(6)}`;

  it.runIf(available)('admits exactly the limit under concurrent calls from two handles', async () => {
    const k = key('exact');
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        (i % 2 ? store.a : store.b).admit([{ key: k, limit: 15, amount: 1 }]),
      ),
    );
    expect(results.filter((r) => r.admitted)).toHaveLength(15);
    expect(await store.amounts(k)).toHaveLength(15);
    for (const r of results.filter((x) => !x.admitted)) {
      expect(r.states[0]!.used).toBe(15);
      expect(r.states[0]!.retryMs).toBeGreaterThan(WINDOW_MS - 15_000);
    }
  });

  it.runIf(available)(
    "keeps each window's total equal to what its entries add up to, through admissions, corrections and departures",
    async () => {
      const [busy, idle] = [key('total'), key('total-idle')];
      const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
      const expectTotals = async () => {
        for (const k of [busy, idle]) expect(await store.total(k)).toBe(sum(await store.amounts(k)));
      };
      const admitted = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          (i % 2 ? store.a : store.b).admit([
            { key: busy, limit: 1_000, amount: 10 + i },
            { key: idle, limit: 1_000, amount: 1 },
          ]),
        ),
      );
      expect(admitted.every((r) => r.admitted)).toBe(true);
      await expectTotals();
      // Settles correct their amounts, some up, some down.
      await Promise.all(admitted.slice(0, 6).map((r, i) => store.a.correct(r.entries[0]!, i % 2 ? 3 : 40)));
      await expectTotals();
      // The busy window's entries leave it; the next admission there subtracts them, the sweep the idle's.
      await store.age(busy, WINDOW_MS + 1);
      await store.age(idle, WINDOW_MS + 1);
      expect((await store.b.admit([{ key: busy, limit: 1_000, amount: 7 }])).states[0]!.used).toBe(7);
      await store.sweep();
      await expectTotals();
      expect(await store.total(busy)).toBe(7);
    },
  );

  it.runIf(available)(
    'is rolling: a call counts for 60 s from its admission, not to a window boundary',
    async () => {
      const k = key('rolling');
      const count: WindowCount[] = [{ key: k, limit: 2, amount: 1 }];
      expect((await store.a.admit(count)).admitted).toBe(true);
      await store.age(k, 50_000);
      const second = await store.b.admit(count);
      expect(second.admitted).toBe(true);
      expect(second.states[0]).toMatchObject({ used: 2, resetMs: WINDOW_MS });
      // Full: the next fits when the older call (50 s old) leaves, about 10 s from now.
      const refused = await store.a.admit(count);
      expect(refused.admitted).toBe(false);
      expect(refused.states[0]!.used).toBe(2);
      expect(refused.states[0]!.retryMs).toBeGreaterThan(8_000);
      expect(refused.states[0]!.retryMs).toBeLessThanOrEqual(10_000);
      expect(refused.states[0]!.resetMs).toBeGreaterThan(58_000);
      // 10 s later the older one has left; the newer (now 10 s old) still counts: one more fits, not two.
      await store.age(k, 10_000);
      expect((await store.b.admit(count)).admitted).toBe(true);
      const again = await store.a.admit(count);
      expect(again.admitted).toBe(false);
      expect(again.states[0]!.retryMs).toBeGreaterThan(48_000);
      expect(await store.amounts(k)).toHaveLength(2);
    },
  );

  it.runIf(available)(
    'counts a call in all its windows or none; weighted amounts and their correction',
    async () => {
      const requests = key('rpm');
      const tokens = key('tpm');
      const call = (amount: number): WindowCount[] => [
        { key: requests, limit: 10, amount: 1 },
        { key: tokens, limit: 1_000, amount },
      ];
      const first = await store.a.admit(call(700));
      expect(first.admitted).toBe(true);
      expect(first.states.map((s) => s.used)).toEqual([1, 700]);
      // Over the tpm: refused, and the rpm window did not count it either.
      const over = await store.b.admit(call(400));
      expect(over.admitted).toBe(false);
      expect(over.states[0]).toMatchObject({ used: 1, retryMs: 0 });
      expect(over.states[1]!.used).toBe(700);
      expect(await store.amounts(requests)).toEqual([1]);
      // The settle corrects the held 700 to the 250 really used: now it fits.
      await store.a.correct(first.entries[1]!, 250);
      expect(await store.amounts(tokens)).toEqual([250]);
      const fits = await store.b.admit(call(400));
      expect(fits.admitted).toBe(true);
      expect(fits.states.map((s) => s.used)).toEqual([2, 650]);
      // An amount above the limit by itself never fits.
      const never = await store.a.admit(call(1_001));
      expect(never.admitted).toBe(false);
      expect(never.states[1]!.retryMs).toBeNull();
    },
  );

  it.runIf(available)(
    'an entry that left the window is gone and its correction changes nothing',
    async () => {
      const k = key('gone');
      const first = await store.a.admit([{ key: k, limit: 5, amount: 5 }]);
      await store.age(k, WINDOW_MS);
      const next = await store.b.admit([{ key: k, limit: 5, amount: 5 }]);
      expect(next.admitted).toBe(true);
      expect(next.states[0]!.used).toBe(5);
      await store.a.correct(first.entries[0]!, 1);
      expect(await store.amounts(k)).toEqual([5]);
    },
  );
});

describe('rolling windows in the database', () => {
  /** The buffers one admission of `k` reads, its nested statements included (a count, not a time). */
  async function admissionBuffers(k: string) {
    const [row] = await queryRows<{ 'QUERY PLAN': unknown }>(
      server.deps.db,
      sql`explain (analyze, buffers, timing off, format json)
            select * from svc_rate_admit(array[${k}]::text[], array[1000000]::int[], array[1]::int[], ${WINDOW_MS}::int)`,
    );
    const raw = row!['QUERY PLAN'];
    const [plan] = (typeof raw === 'string' ? JSON.parse(raw) : raw) as {
      Plan: { 'Shared Hit Blocks': number; 'Shared Read Blocks': number };
    }[];
    return plan!.Plan['Shared Hit Blocks'] + plan!.Plan['Shared Read Blocks'];
  }

  it('admits the calls in flight in one statement, each against the calls before it', async () => {
    const windows = createPostgresWindows(server.deps.db, log);
    const [requests, tokens] = [`rpm:test:${randomToken(6)}`, `tpm:test:${randomToken(6)}`];
    const call = (amount: number): WindowCount[] => [
      { key: requests, limit: 10, amount: 1 },
      { key: tokens, limit: 1_000, amount },
    ];
    // The first goes alone; the three asked while it runs share the next statement.
    const first = windows.admit(call(700));
    const [over, fits, last] = await Promise.all([
      windows.admit(call(400)),
      windows.admit(call(200)),
      windows.admit(call(100)),
    ]);
    expect((await first).admitted).toBe(true);
    // Refused in all its windows, and the calls after it were admitted as if it had not been asked.
    expect(over.admitted).toBe(false);
    expect(over.states.map((s) => s.used)).toEqual([1, 700]);
    expect(over.states[1]!.retryMs).toBeGreaterThan(WINDOW_MS - 10_000);
    expect([fits, last].map((r) => r.admitted)).toEqual([true, true]);
    expect(fits.states.map((s) => s.used)).toEqual([2, 900]);
    expect(last.states.map((s) => s.used)).toEqual([3, 1_000]);
    // One statement has one clock: the batch's two entries were stamped at the same instant.
    const stamps = await queryRows<{ at: string }>(
      server.deps.db,
      sql`select at::text as at from rate_window_entries where key = ${tokens} order by id`,
    );
    expect(stamps.map((r) => r.at)).toHaveLength(3);
    expect(stamps[1]!.at).toBe(stamps[2]!.at);
    expect(stamps[0]!.at).not.toBe(stamps[1]!.at);
    // Corrections in flight together: each entry its own amount, the total moved by both.
    await Promise.all([
      windows.correct((await first).entries[1]!, 100),
      windows.correct(fits.entries[1]!, 50),
    ]);
    const store = databaseStore();
    expect(await store.amounts(tokens)).toEqual([100, 50, 100]);
    expect(await store.total(tokens)).toBe(250);
    windows.close();
  });

  it('an admission does not walk the rows earlier admissions deleted', async () => {
    const k = `rpm:test:${randomToken(6)}`;
    const rows = 20_000;
    await queryRows(
      server.deps.db,
      sql`insert into rate_window_entries (key, at, amount)
            select ${k}, now() - interval '61 seconds', 1 from generate_series(1, ${rows})`,
    );
    await queryRows(server.deps.db, sql`insert into rate_window_totals (key, used) values (${k}, ${rows})`);
    // This admission deletes the 20,000 rows that left the window; they stay in the index until a vacuum.
    await admissionBuffers(k);
    expect(await databaseStore().total(k)).toBe(1);
    // The next one starts where it stopped: a few pages, not the 20,000 deleted rows' hundreds.
    expect(await admissionBuffers(k)).toBeLessThan(60);
  });
});
