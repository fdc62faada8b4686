import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { eq } from 'drizzle-orm';
import OpenAI from 'openai';
import pg from 'pg';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { eventually } from '../helpers/eventually.js';
import { rejectionOf } from '../helpers/json.js';
import { usageRecords } from '../../src/db/schema.js';

// The rate-limit store not answering (CONTRACT §11 "Rate limits": held across every process like the
// concurrency cap; docs/limits.md, "The store down"). A call under a limit is refused with 503
// `rate_limit_unavailable` and `Retry-After` in the model routes' error shape, and billed nothing
// (counting per process would let every process admit the whole limit); a call without a limit never
// asks the windows and is served as ever; once the store answers, the limited credential is served again.
//
// - On the database (the default store): the windows' table is held locked by another session, so the
//   admission's statement meets DATABASE_QUERY_TIMEOUT_MS; everything else of the call is untouched.
// - On Redis (REDIS_URL), reached through a TCP proxy of the test's own that the test cuts: Redis holds
//   the concurrency cap too, so with it gone every model call is refused 503 (`concurrency_unavailable`
//   when the slot is asked first), limited or not, and none is billed.

const REDIS = { host: '127.0.0.1', port: Number(process.env.TEST_REDIS_PORT ?? 6379) };
const redisAnswers =
  spawnSync('redis-cli', ['-h', REDIS.host, '-p', String(REDIS.port), 'ping'], {
    encoding: 'utf8',
  }).stdout?.trim() === 'PONG';

type ApiError = InstanceType<typeof OpenAI.APIError>;

/** Two callers of one server: an organization with an rpm of 1,000, and one with no limit at all. */
function callers(get: () => TestServer) {
  const chat = (key: string) =>
    new OpenAI({ apiKey: key, baseURL: `${get().url}/v1`, maxRetries: 0, timeout: 20_000 }).chat.completions
      .create({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] })
      .withResponse();
  const usageCount = async (u: TestUser) =>
    (await get().deps.db.select().from(usageRecords).where(eq(usageRecords.orgKey, u.orgKey))).length;
  async function make() {
    const server = get();
    const limited = await createUser(server);
    const limitedKey = await createApiToken(server, limited, limited.orgKey);
    // The organization's limit: its key is random, so no earlier run's counts (Redis outlives a test
    // database, whose credential ids start again at 1) can be in its window.
    const res = await client(server.url).put(
      `/v1/clients/${limited.clientId}/limits`,
      { rpm: 1_000, tpm: null },
      { token: limited.session },
    );
    expect(res.status).toBe(200);
    const free = await createUser(server);
    const freeKey = await createApiToken(server, free, free.orgKey);
    // The store answers: the limited call is counted in it (its headers say so).
    const first = await chat(limitedKey.secret);
    expect(first.response.headers.get('x-ratelimit-remaining-requests')).toBe('999');
    await eventually(async () => (await usageCount(limited)) === 1);
    return { limited, limitedKey, free, freeKey };
  }
  /** A refusal in the model routes' error shape (CONTRACT §3), with Retry-After. */
  async function refused(key: string, code: string | RegExp) {
    const err = await rejectionOf<ApiError>(chat(key));
    expect(err.status).toBe(503);
    expect(err.code).toMatch(code);
    const body = err.error as { code?: unknown; message?: unknown };
    expect(body.code).toBe(err.code);
    expect(typeof body.message).toBe('string');
    expect(Number(err.headers?.get('retry-after'))).toBeGreaterThan(0);
  }
  /** Served again, counted after the one call before the outage (a refused call counted nothing). */
  async function servedAgain(key: string) {
    await eventually(async () => {
      try {
        const again = await chat(key);
        return again.response.headers.get('x-ratelimit-remaining-requests') === '998';
      } catch {
        return false;
      }
    });
  }
  return { chat, usageCount, make, refused, servedAgain };
}

describe.runIf(storageMode() === 'postgres')('the windows not answering, on the database', () => {
  let server: TestServer;
  const c = callers(() => server);
  beforeAll(async () => {
    server = await startTestServer({ env: { DATABASE_QUERY_TIMEOUT_MS: '1000' } });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('a call under a limit is refused 503 rate_limit_unavailable and billed nothing; one without is served', async () => {
    const { limited, limitedKey, free, freeKey } = await c.make();
    const locker = new pg.Client({ connectionString: server.databaseUrl });
    await locker.connect();
    try {
      await locker.query('begin');
      await locker.query('lock table rate_window_entries in access exclusive mode');
      await c.refused(limitedKey.secret, 'rate_limit_unavailable');
      // Anthropic's route refuses it the same way, in Anthropic's shape (a 503 there is `overloaded_error`).
      const messages = await fetch(`${server.url}/v1/messages`, {
        method: 'POST',
        headers: { 'x-api-key': limitedKey.secret, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(messages.status).toBe(503);
      const answer = (await messages.json()) as { type: string; error: { type: string; message: unknown } };
      expect(answer).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } });
      expect(typeof answer.error.message).toBe('string');
      expect(Number(messages.headers.get('retry-after'))).toBeGreaterThan(0);
      // No limit: the windows are never asked; the call is served and billed as ever.
      const served = await c.chat(freeKey.secret);
      expect(served.data.choices[0]!.message.content).toBeTruthy();
      expect(served.response.headers.get('x-ratelimit-limit-requests')).toBeNull();
      await eventually(async () => (await c.usageCount(free)) === 1);
      expect(await c.usageCount(limited)).toBe(1);
    } finally {
      await locker.query('rollback');
      await locker.end();
    }
    await c.servedAgain(limitedKey.secret);
    await eventually(async () => (await c.usageCount(limited)) === 2);
  });
});

describe.runIf(redisAnswers)('Redis gone (REDIS_URL)', () => {
  let proxy: TcpProxy;
  let server: TestServer;
  const c = callers(() => server);
  beforeAll(async () => {
    proxy = await startTcpProxy(REDIS);
    server = await startTestServer({ env: { REDIS_URL: `redis://127.0.0.1:${proxy.port}` } });
  });
  afterAll(async () => {
    await server?.close();
    await proxy?.close();
  });

  it('every model call is refused 503 in the contract shape and billed nothing, until Redis is back', async () => {
    const { limited, limitedKey, free, freeKey } = await c.make();
    proxy.cut();
    try {
      await c.refused(limitedKey.secret, /^(rate_limit|concurrency)_unavailable$/);
      await c.refused(freeKey.secret, /^(rate_limit|concurrency)_unavailable$/);
      expect(await c.usageCount(limited)).toBe(1);
      expect(await c.usageCount(free)).toBe(0);
    } finally {
      proxy.heal();
    }
    await c.servedAgain(limitedKey.secret);
    await eventually(async () => (await c.usageCount(limited)) === 2);
    const served = await c.chat(freeKey.secret);
    expect(served.response.headers.get('x-ratelimit-limit-requests')).toBeNull();
    await eventually(async () => (await c.usageCount(free)) === 1);
  });
});
