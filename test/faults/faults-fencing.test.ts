import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { callChat, orgLedger, waitUntil, type CallResult } from '../helpers/chat-load.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { parseAs } from '../helpers/json.js';
import { countTokens } from '../../src/models/metering/tokenizer.js';

// Self-fencing (src/models/slot/liveness.ts): two svc processes on one PostgreSQL, A through a TCP
// proxy of the test's own, B straight. A holds every slot of an org with long streams when its path to
// the database alone is cut. B, beating all along, declares A dead after PROCESS_DEAD_AFTER_MS and takes
// the slots. A must have ended its streams before that (billed for what they delivered) and admit
// nothing while it cannot beat; once back, it must not use what was reclaimed. The provider never sees
// more than the cap at once, and every call is debited exactly what its client received.
//
// PostgreSQL only: two processes cannot share an embedded PGlite.

const CAP = 2;
const DEAD_AFTER_MS = 4_000;
const WORDS = 100; // × 200 ms a word: a 20 s stream, far longer than the partition's detection
/** A whole answer's debit: 10 prompt + 2 × WORDS completion tokens (the fake's TEST_PRICES). */
const WHOLE = 10 + 2 * WORDS;

/** A streamed call, with the content words its client received. */
interface Streamed {
  status: number;
  requestId: string | null;
  words: number;
  /** The content the client received, as it received it. */
  delivered: string;
  done: boolean;
  errorCode: string | null;
}

async function streamChat(base: string, key: string): Promise<Streamed> {
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'any', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    signal: AbortSignal.timeout(60_000),
  });
  const text = await res.text();
  let words = 0;
  let delivered = '';
  let errorCode: string | null = null;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {')) continue;
    const event = parseAs<{
      choices?: { delta?: { content?: string | null } }[];
      error?: { code?: string };
    }>(line.slice(6));
    if (event.error) errorCode = event.error.code ?? 'unknown';
    for (const c of event.choices ?? []) {
      if (!c.delta?.content) continue;
      words++;
      delivered += c.delta.content;
    }
  }
  return {
    status: res.status,
    requestId: res.headers.get('x-svc-request-id'),
    words,
    delivered,
    done: text.includes('data: [DONE]'),
    errorCode,
  };
}

describe.runIf(storageMode() === 'postgres')(
  'a live process cut off from the database alone fences itself',
  { timeout: 120_000 },
  () => {
    let server: TestServer;
    let fake: FakeUpstream;
    let proxy: TcpProxy;
    let a: ChildSvc; // through the proxy: the one cut off
    let b: ChildSvc; // straight to the database: the peer that declares it dead
    let owner: TestUser;
    let key: string;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      // This process beats too; kept out of the way so that B is the one that reclaims.
      server = await startTestServer({ env: fake.env({ PROCESS_DEAD_AFTER_MS: '60000' }) });
      owner = await createUser(server);
      key = (await createApiToken(server, owner, owner.orgKey)).secret;
      await setOrgBalance(server, owner.orgKey, 10_000_000);
      proxy = await startTcpProxy({ host: '127.0.0.1', port: Number(new URL(server.databaseUrl!).port) });
      const env = {
        ORG_MAX_CONCURRENCY: String(CAP),
        PROCESS_DEAD_AFTER_MS: String(DEAD_AFTER_MS),
        DATABASE_QUERY_TIMEOUT_MS: '1500',
      };
      [a, b] = await Promise.all([
        // A at info: the line that says its fence is down is one (src/models/slot/liveness.ts).
        startChildSvc(
          fake.env({ ...env, DATABASE_URL: proxy.urlFor(server.databaseUrl!), LOG_LEVEL: 'info' }),
        ),
        startChildSvc(fake.env({ ...env, DATABASE_URL: server.databaseUrl! })),
      ]);
    });
    afterAll(async () => {
      await a?.kill();
      await b?.kill();
      await proxy?.close();
      await server?.close();
      await fake?.close();
    });

    it('its streams end before its peer takes their slots, it admits nothing until it beats again, and the cap holds at the provider', async () => {
      const before = await orgLedger(server, owner.orgKey);
      // Every call but A's streams, as its client saw it: the ledger is checked against these.
      const seen: CallResult[] = [];
      const call = async (base: string) => {
        const r = await callChat(base, key);
        seen.push(r);
        return r;
      };
      fake.reply = () => ({ content: Array.from({ length: WORDS }, (_, i) => `w${i}`).join(' ') });
      fake.chunkDelayMs = 200;
      fake.maxInFlight = 0;
      const streams = Array.from({ length: CAP }, () => streamChat(a.url, key));
      await waitUntil(() => fake.inFlight === CAP, 10_000);
      // B sees the org at its cap.
      expect((await call(b.url)).code).toBe('concurrency_limit');

      proxy.cut();
      const cutAt = Date.now();
      // (JSON calls from here on: the streams' chunk delay does not touch them; the provider's settings are
      // shared, and a shorter delay would hurry A's streams to their end.)
      fake.headersDelayMs = 1_000; // B's calls overlap each other at the provider
      await Promise.all([
        // A, silent, fences itself: a new call is refused at once with 503 and Retry-After.
        waitUntil(async () => {
          const r = await call(a.url);
          expect(r.status).toBe(503);
          return r.retryAfter !== null && r.ms < 500;
        }, 15_000),
        // B declares A dead and gets the whole cap.
        waitUntil(async () => {
          const bCalls = await Promise.all(Array.from({ length: CAP }, () => call(b.url)));
          return bCalls.every((c) => c.status === 200);
        }, 20_000).then(() =>
          console.log(`fencing: B had the whole cap ${Date.now() - cutAt} ms after A's cut`),
        ),
      ]);
      const cut = await Promise.all(streams);
      console.log(
        `fencing: A's streams (words, error): ${JSON.stringify(cut.map((s) => [s.words, s.errorCode]))}`,
      );
      // A's streams had ended before B took their slots: never more than the cap at the provider.
      expect(fake.maxInFlight).toBeLessThanOrEqual(CAP);
      for (const s of cut) {
        expect(s.status).toBe(200);
        expect(s.done).toBe(false); // ended early, with an error event after what it delivered
        expect(s.errorCode).toBe('database_unavailable');
        expect(s.words).toBeLessThan(WORDS);
      }

      // A beats again: it was declared dead meanwhile, and what it held then is no longer its own.
      proxy.heal();
      await waitUntil(async () => (await call(a.url)).status === 200, 15_000);
      // Both processes at once, twice the cap asked for: the provider still sees at most the cap.
      fake.maxInFlight = 0;
      const mixed = await Promise.all(Array.from({ length: 2 * CAP }, (_, i) => call(i % 2 ? a.url : b.url)));
      fake.reset();
      expect(fake.maxInFlight).toBeLessThanOrEqual(CAP);
      expect(mixed.filter((r) => r.status === 200).length).toBeGreaterThan(0);
      expect(mixed.filter((r) => r.status !== 200 && r.code !== 'concurrency_limit')).toEqual([]);

      // The ledger: every call debited exactly what its client received. A's cut streams: their delivered output
      // (the provider's usage never came: svc's count) plus the prompt; the whole answers WHOLE each.
      await waitUntil(async () => (await orgLedger(server, owner.orgKey)).openHolds === 0, 20_000);
      await waitUntil(async () => (await orgLedger(server, owner.orgKey)).liveLeases === 0, 10_000);
      const pool = server.deps.database.pool!;
      const rows = (
        await pool.query(
          `select request_id, prompt_tokens, completion_tokens, credits_debited::int as debited, outcome
           from usage_records where org_key = $1 and request_id = any($2::text[])`,
          [owner.orgKey, cut.map((s) => s.requestId)],
        )
      ).rows as { request_id: string; prompt_tokens: number; completion_tokens: number; debited: number }[];
      expect(rows).toHaveLength(CAP);
      for (const s of cut) {
        const row = rows.find((r) => r.request_id === s.requestId)!;
        // The provider's usage never came: the delivered output as the tokenizer counts it (CONTRACT §9).
        expect(row.completion_tokens).toBe(await countTokens(s.delivered));
        expect(row.debited).toBe(row.prompt_tokens + 2 * row.completion_tokens);
      }
      const after = await orgLedger(server, owner.orgKey);
      const whole = seen.filter((r) => r.answered).length;
      expect(after.usageRows - before.usageRows).toBe(CAP + whole);
      const cutDebits = rows.reduce((n, r) => n + r.debited, 0);
      expect(after.debited - before.debited).toBe(cutDebits + WHOLE * whole);
      expect(await checkInvariants(server.deps.db)).toEqual([]);
      expect(a.output()).toContain('admitting no calls: no heartbeat has landed for a while');
      expect(a.output()).toContain('a heartbeat landed: admitting calls again');
      expect(a.output()).toContain('ending calls in flight');
      expect(a.output()).toContain('a peer declared this process dead');
      expect(a.alive() && b.alive()).toBe(true);
    });
  },
);
