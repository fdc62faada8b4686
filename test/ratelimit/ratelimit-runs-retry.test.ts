import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { eq } from 'drizzle-orm';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { ageDatabaseWindow } from '../helpers/rate-windows.js';
import { client } from '../helpers/http.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { authenticateRunSocket } from '../helpers/run-socket.js';
import { eventually } from '../helpers/eventually.js';
import { usageRecords } from '../../src/db/schema.js';
import type { ServerFrame } from '../../src/runs/frames.js';

// The RPM and TPM limits (CONTRACT §11) where a client meets them: a run step over a limit ends the run
// with `error {code: "rate_limit_exceeded"}` (the steps before it billed, the refused one not), and the
// official `openai` client's own retry (on chat completions, an organization's rpm) and `@anthropic-ai/sdk`'s
// (on /v1/messages, a credential's rpm), told when by Retry-After, succeed once the rolling minute has let
// the earlier call go. On each store: the database, and Redis (REDIS_URL, 127.0.0.1:6379).
//
// The minute is not waited out: the earlier call's entry is moved 57 s into the past in the store, so the
// window rolls 3 s after the refusal, and the client's retry is what the test waits for.

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
const redisAnswers =
  spawnSync('redis-cli', ['-u', REDIS_URL, 'ping'], { encoding: 'utf8' }).stdout?.trim() === 'PONG';

const stores: [string, Record<string, string> | null][] = [
  ['the database', {}],
  ['Redis', redisAnswers ? { REDIS_URL } : null],
];

describe.each(stores)('limits met by runs and by the official clients, on %s', (_name, env) => {
  let server: TestServer;
  let redis: Redis | undefined;
  beforeAll(async () => {
    if (!env) return;
    server = await startTestServer({ env });
    if (env.REDIS_URL) redis = new Redis(env.REDIS_URL);
  });
  afterAll(async () => {
    await redis?.quit();
    await server?.close();
  });

  /** Moves every entry of a window `ms` into the past, in whichever store holds it. */
  async function age(window: string, ms: number) {
    if (redis) {
      for (const m of await redis.zrange(`svc:rate:${window}`, 0, -1))
        await redis.zincrby(`svc:rate:${window}`, -ms, m);
      return;
    }
    await ageDatabaseWindow(server.deps.db, window, ms);
  }

  const setLimits = async (owner: TestUser, rpm: number | null, tpm: number | null) => {
    const res = await client(server.url).put(
      `/v1/clients/${owner.clientId}/limits`,
      { rpm, tpm },
      { token: owner.session },
    );
    expect(res.status).toBe(200);
  };
  const setKeyLimits = async (owner: TestUser, tokenId: number, rpm: number | null, tpm: number | null) => {
    const res = await client(server.url).put(
      `/v1/clients/${owner.clientId}/tokens/${tokenId}/limits`,
      { rpm, tpm },
      { token: owner.session },
    );
    expect(res.status).toBe(200);
  };
  /** A fetch that records every attempt the client's transport made: its status, headers and time. */
  const recording =
    (attempts: { status: number; headers: Headers; at: number }[]) =>
    async (url: string | URL | Request, init?: RequestInit) => {
      const res = await fetch(url, init);
      attempts.push({ status: res.status, headers: res.headers, at: Date.now() });
      return res;
    };
  const usageCount = async (owner: TestUser) =>
    (await server.deps.db.select().from(usageRecords).where(eq(usageRecords.orgKey, owner.orgKey))).length;

  it.runIf(env)('a run step over the rpm ends the run with error rate_limit_exceeded', async () => {
    const owner = await createUser(server);
    const key = await createApiToken(server, owner, owner.orgKey);
    await setLimits(owner, 1, null);
    const s = await authenticateRunSocket(server.url, key.secret);
    expect(s.answer.type).toBe('authenticated');
    s.ws.send(
      JSON.stringify({
        type: 'start',
        agent: 'default',
        messages: [{ role: 'user', content: 'read the README.md file' }],
      }),
    );
    const frames: ServerFrame[] = [];
    const next = async (type: string) => {
      for (;;) {
        const f = await s.frame();
        frames.push(f);
        if (f.type === type || f.type === 'error')
          return f as Extract<ServerFrame, { type: string }> & Record<string, unknown>;
      }
    };
    // Step 1 is admitted (the one call of the minute) and asks for a tool.
    const call = await next('tool_call');
    expect(call.type).toBe('tool_call');
    s.ws.send(
      JSON.stringify({ type: 'tool_result', tool_call_id: call.tool_call_id, status: 'ok', result: '# svc' }),
    );
    // Step 2 is the minute's second model call: refused, and the run ends with it.
    const ended = await next('run_completed');
    expect(ended).toMatchObject({ type: 'error', code: 'rate_limit_exceeded' });
    expect(String(ended.message)).toMatch(/1 requests per minute/);
    expect(frames.some((f) => f.type === 'run_completed')).toBe(false);
    // Step 1 billed once, step 2 never reached the provider nor the ledger.
    await eventually(async () => (await usageCount(owner)) === 1);
    s.ws.close();
    await s.closed;
    expect(await usageCount(owner)).toBe(1);
  });

  it.runIf(env)(
    'a run whose first step is over the tpm is refused the same way, and nothing is billed',
    async () => {
      const owner = await createUser(server);
      const key = await createApiToken(server, owner, owner.orgKey);
      await setLimits(owner, null, 5);
      const s = await authenticateRunSocket(server.url, key.secret);
      s.ws.send(
        JSON.stringify({
          type: 'start',
          agent: 'default',
          messages: [{ role: 'user', content: 'hello there' }],
        }),
      );
      let f = await s.frame();
      while (f.type !== 'error' && f.type !== 'run_completed') f = await s.frame();
      expect(f).toMatchObject({ type: 'error', code: 'rate_limit_exceeded' });
      s.ws.close();
      await s.closed;
      expect(await usageCount(owner)).toBe(0);
    },
  );

  it.runIf(env)(
    'the openai client retries a 429 after Retry-After and succeeds once the minute rolls',
    async () => {
      const owner = await createUser(server);
      const key = await createApiToken(server, owner, owner.orgKey);
      await setLimits(owner, 1, null);
      // What the client's transport saw: every attempt's status and headers.
      const attempts: { status: number; headers: Headers; at: number }[] = [];
      const openai = new OpenAI({
        apiKey: key.secret,
        baseURL: `${server.url}/v1`,
        // One retry: its default backoff (0.5–1 s) would meet the window still full, so only a client that
        // waited as Retry-After said succeeds.
        maxRetries: 1,
        timeout: 20_000,
        fetch: recording(attempts),
      });
      const ask = () =>
        openai.chat.completions.create({
          model: 'm',
          max_tokens: 8,
          messages: [{ role: 'user', content: 'hi' }],
        });
      await ask();
      await age(`rpm:org:${owner.orgKey}`, 57_000);
      const answer = await ask();
      expect(answer.choices[0]!.message.content).toBeTruthy();
      expect(attempts.map((a) => a.status)).toEqual([200, 429, 200]);
      const refusal = attempts[1]!;
      const retryAfter = Number(refusal.headers.get('retry-after'));
      expect(retryAfter).toBeGreaterThanOrEqual(2);
      expect(retryAfter).toBeLessThanOrEqual(3);
      expect(refusal.headers.get('x-ratelimit-limit-requests')).toBe('1');
      expect(refusal.headers.get('x-ratelimit-remaining-requests')).toBe('0');
      // The rolling window: the 57 s old call empties it in about 3 s, as reset says.
      expect(refusal.headers.get('x-ratelimit-reset-requests')).toMatch(/^[23]s$/);
      // The client waited what the header said before its retry.
      expect(attempts[2]!.at - refusal.at).toBeGreaterThanOrEqual(retryAfter * 1000 - 50);
      expect(attempts[2]!.headers.get('x-ratelimit-remaining-requests')).toBe('0');
      expect(await usageCount(owner)).toBeLessThanOrEqual(2);
      await eventually(async () => (await usageCount(owner)) === 2);
    },
  );

  it.runIf(env)(
    'the anthropic client retries a 429 on /v1/messages after Retry-After, reading anthropic-ratelimit-*',
    async () => {
      const owner = await createUser(server);
      const key = await createApiToken(server, owner, owner.orgKey);
      // Redis outlives the test database, whose credential ids start again at 1: an earlier run's counts
      // for this id go first.
      await redis?.del(`svc:rate:rpm:token:${key.id}`, `svc:rate:tpm:token:${key.id}`);
      // The credential's own limit (the organization has none): one call a minute, tokens plenty.
      await setKeyLimits(owner, key.id, 1, 100_000);
      const attempts: { status: number; headers: Headers; at: number }[] = [];
      const anthropic = new Anthropic({
        apiKey: key.secret,
        baseURL: server.url,
        // As above: one retry, which only a client that waited as Retry-After said can win.
        maxRetries: 1,
        timeout: 20_000,
        fetch: recording(attempts),
      });
      const send = () =>
        anthropic.messages.create({
          model: 'm',
          max_tokens: 8,
          messages: [{ role: 'user', content: 'hi' }],
        });
      await send();
      await age(`rpm:token:${key.id}`, 57_000);
      const answer = await send();
      expect(answer.content.length).toBeGreaterThan(0);
      expect(attempts.map((a) => a.status)).toEqual([200, 429, 200]);
      const refusal = attempts[1]!;
      const retryAfter = Number(refusal.headers.get('retry-after'));
      expect(retryAfter).toBeGreaterThanOrEqual(2);
      expect(retryAfter).toBeLessThanOrEqual(3);
      expect(refusal.headers.get('anthropic-ratelimit-requests-limit')).toBe('1');
      expect(refusal.headers.get('anthropic-ratelimit-requests-remaining')).toBe('0');
      // RFC 3339, when the window is empty again: the 57 s old call leaves it in about 3 s.
      const reset = Date.parse(refusal.headers.get('anthropic-ratelimit-requests-reset')!);
      expect(reset - refusal.at).toBeGreaterThan(0);
      expect(reset - refusal.at).toBeLessThanOrEqual(4_000);
      expect(refusal.headers.get('anthropic-ratelimit-tokens-limit')).toBe('100000');
      expect(refusal.headers.get('x-ratelimit-limit-requests')).toBeNull();
      expect(attempts[2]!.at - refusal.at).toBeGreaterThanOrEqual(retryAfter * 1000 - 50);
      expect(attempts[2]!.headers.get('anthropic-ratelimit-requests-remaining')).toBe('0');
      await eventually(async () => (await usageCount(owner)) === 2);
    },
  );
});
