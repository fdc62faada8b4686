import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, storageMode, type TestServer } from './helpers/server.js';
import { client } from './helpers/http.js';
import { queryRows } from '../src/db/client.js';
import { sql } from 'drizzle-orm';

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
    const err = await limiter.check(key).then(() => null, (e: unknown) => e);
    expect(err).toMatchObject({ status: 429, code: 'RATE_LIMITED' });
    const retryAfter = Number((err as { extra: { headers: Record<string, string> } }).extra.headers['Retry-After']);
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

  it.runIf(storageMode() === 'postgres')('stores counts in the shared rate_limits table, keyed by hash only', async () => {
    const email = `stored-${Date.now()}@example.test`;
    await server.deps.limits.loginFailures.fail(email);
    const rows = await queryRows<{ key: string; points: number }>(server.deps.db, sql`select key, points from rate_limits`);
    expect(rows.length).toBeGreaterThan(0);
    expect(rows.some((r) => r.key.includes('@'))).toBe(false);
  });
});

describe('per-address limit (CONTRACT §1: RATE_LIMIT_IP_PER_MIN)', () => {
  it('answers 429 RATE_LIMITED with Retry-After once an address passes its budget on sign-in routes', async () => {
    const small = await startTestServer({ env: { RATE_LIMIT_IP_PER_MIN: '3' } });
    try {
      const api = client(small.url);
      const statuses: number[] = [];
      for (let i = 0; i < 3; i++) statuses.push((await api.post('/v1/login', { email: 'a@example.test', password: 'x' })).status);
      expect(statuses).not.toContain(429);
      const limited = await api.post('/v1/register', { email: 'b@example.test', name: 'B', password: 'x' });
      expect(limited.status).toBe(429);
      expect(limited.body.detail.code).toBe('RATE_LIMITED');
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
      // Routes outside the list are not counted.
      expect((await api.get('/healthz')).status).toBe(200);
    } finally {
      await small.close();
    }
  });
});
