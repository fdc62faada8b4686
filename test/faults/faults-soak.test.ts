import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { callChat, orgLedger, sleep, waitUntil, type CallResult } from '../helpers/chat-load.js';
import { checkInvariants } from '../../src/billing/invariants.js';

// Two svc processes on one PostgreSQL behind a TCP proxy, under mixed load (JSON and
// streams, clients that leave mid-stream, more calls than the cap), while faults come one after another:
// the database reset, slowed, the provider failing, breaking mid-stream, slowing. At the end: no process
// exited, every answered call was billed its exact price once, no call billed more than its price, the
// ledger's invariants hold, nothing left held or leased, memory and descriptors bounded.
//
// The suite runs it for 40 s; a longer run: SOAK_SECONDS=600 TEST_DATABASE_URL=… npx vitest run
// test/faults/faults-soak.test.ts (SOAK_SECONDS=0 skips it). PostgreSQL only: two processes share the database.

const SOAK_SECONDS = Number(process.env.SOAK_SECONDS ?? 40);
const PRICE = 20; // the fake's default reply: 10 prompt + 2 × 5 completion tokens (TEST_PRICES)
const CAP = 6;
const WORKERS_PER_PROCESS = 5;

interface Fault {
  name: string;
  start(): void;
  stop(): void;
}

describe.runIf(storageMode() === 'postgres' && SOAK_SECONDS > 0)(
  'soak: mixed load while the database and the provider fail in turn',
  { timeout: (SOAK_SECONDS + 120) * 1000 },
  () => {
    let server: TestServer;
    let fake: FakeUpstream;
    let proxy: TcpProxy;
    let procs: ChildSvc[] = [];
    let owner: TestUser;
    let key: string;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      // Liveness is tested on its own (faults-liveness); a loaded machine must not declare a child dead here:
      // test servers run with a 30 s limit (test/helpers/server.ts).
      server = await startTestServer({ env: fake.env() });
      owner = await createUser(server);
      key = (await createApiToken(server, owner, owner.orgKey)).secret;
      await setOrgBalance(server, owner.orgKey, 50_000_000);
      proxy = await startTcpProxy({ host: '127.0.0.1', port: Number(new URL(server.databaseUrl!).port) });
      const env = fake.env({
        DATABASE_URL: proxy.urlFor(server.databaseUrl!),
        DATABASE_QUERY_TIMEOUT_MS: '1500',
        ORG_MAX_CONCURRENCY: String(CAP),
        PROCESS_DEAD_AFTER_MS: '30000',
        STREAM_STALL_TIMEOUT_MS: '2000',
        MODEL_UPSTREAM_BODY_IDLE_TIMEOUT_MS: '2000',
        MODEL_UPSTREAM_HEADERS_TIMEOUT_MS: '3000',
      });
      procs = await Promise.all([startChildSvc(env), startChildSvc(env)]);
    });
    afterAll(async () => {
      for (const p of procs) await p.kill();
      await proxy?.close();
      await server?.close();
      await fake?.close();
    });

    const faults: Fault[] = [
      { name: 'database reset', start: () => proxy.cut(), stop: () => proxy.heal() },
      {
        name: 'database slow (150 ms each way)',
        start: () => (proxy.latencyMs = 150),
        stop: () => (proxy.latencyMs = 0),
      },
      { name: 'provider 500', start: () => (fake.failStatus = 500), stop: () => (fake.failStatus = null) },
      {
        name: 'provider breaks mid-stream',
        start: () => (fake.breakAfterChunks = 2),
        stop: () => (fake.breakAfterChunks = null),
      },
      {
        name: 'provider slow',
        start: () => (fake.chunkDelayMs = 120),
        stop: () => (fake.chunkDelayMs = 0),
      },
      { name: 'quiet', start: () => {}, stop: () => {} },
    ];

    it(`runs ${SOAK_SECONDS} s with no exit, no unbilled answered call, bounded memory and descriptors`, async () => {
      const before = await orgLedger(server, owner.orgKey);
      const results: CallResult[] = [];
      let running = true;
      let n = 0;
      const worker = async (svc: ChildSvc) => {
        while (running) {
          const i = n++;
          const stream = i % 2 === 1;
          // One call in seven leaves early: a client that goes away mid-call.
          const signal = i % 7 === 3 ? AbortSignal.timeout(20 + (i % 5) * 40) : undefined;
          const r = await callChat(svc.url, key, { stream, ...(signal ? { signal } : {}) });
          results.push(r);
          if (r.status !== 200) await sleep(25); // paced: a refused client tries again a little later
        }
      };
      fake.headersDelayMs = 30;
      const load = Promise.all(
        procs.flatMap((svc) => Array.from({ length: WORKERS_PER_PROCESS }, () => worker(svc))),
      );
      // Warm: what a running process holds, before the faults, once each client has been answered 20 times.
      const WARM_ANSWERS = 20 * WORKERS_PER_PROCESS * procs.length;
      await waitUntil(() => results.filter((r) => r.status === 200).length >= WARM_ANSWERS, 60_000);
      const baseline = procs.map((p) => p.usage());

      const deadline = Date.now() + SOAK_SECONDS * 1000;
      const seen: string[] = [];
      for (let f = 0; Date.now() < deadline; f++) {
        const fault = faults[f % faults.length]!;
        seen.push(fault.name);
        // The scenario: each fault kept for 1.5 s under load, then 1.5 s without, for SOAK_SECONDS.
        fault.start();
        await sleep(1_500);
        fault.stop();
        await sleep(1_500);
      }
      running = false;
      await load;
      fake.reset();
      const end = procs.map((p) => p.usage());

      // No process exited.
      for (const p of procs) expect(p.alive(), p.output()).toBe(true);
      // Nothing unexpected: no 500, only the refusals a client is told to retry.
      const statuses = [...new Set(results.map((r) => r.status))].sort();
      expect(statuses.filter((s) => ![0, 200, 402, 429, 502, 503, 504].includes(s))).toEqual([]);

      // Every kept settle and void has landed and every hold taken ahead has gone back (2 s idle) once no
      // hold of the org is open: a hold stays open until its settle or void is written. Waited for, not
      // slept on (it was a fixed 8 s).
      await waitUntil(async () => (await orgLedger(server, owner.orgKey)).openHolds === 0, 30_000).catch(
        async (err: unknown) => {
          const open = await queryRows(
            server.deps.db,
            sql`select request_id, amount, created_at, expires_at from billing_holds
                where org_key = ${owner.orgKey} and status = 'held'`,
          );
          const ids = new Set(open.map((h) => (h as { request_id: string }).request_id));
          console.log(
            'soak: open holds',
            JSON.stringify(open),
            JSON.stringify(results.filter((r) => ids.has(r.requestId!))),
          );
          console.log(procs.map((p) => p.output().slice(-3000)).join('\n----\n'));
          throw err;
        },
      );

      await waitUntil(async () => (await orgLedger(server, owner.orgKey)).liveLeases === 0, 10_000);

      const rows = await queryRows<{ request_id: string; credits_debited: unknown }>(
        server.deps.db,
        sql`select request_id, credits_debited from usage_records where org_key = ${owner.orgKey}`,
      );
      const billed = new Map(rows.map((r) => [r.request_id, Number(r.credits_debited)]));
      const answered = results.filter((r) => r.answered);
      // Every answered call billed exactly its price, once (usage_records is unique per request id).
      const unbilled = answered.filter((r) => billed.get(r.requestId!) !== PRICE);
      expect(unbilled).toEqual([]);
      // No call billed more than its price; calls cut short billed for what they delivered (≤ price).
      expect(rows.filter((r) => Number(r.credits_debited) > PRICE)).toEqual([]);
      // The ledger agrees with the usage records, and with itself.
      const after = await orgLedger(server, owner.orgKey);
      const recorded = rows.reduce((s, r) => s + Number(r.credits_debited), 0);
      expect(after.debited - before.debited).toBe(recorded);
      expect(await checkInvariants(server.deps.db)).toEqual([]);

      // Memory and descriptors bounded: what grew over the soak is small against a running process.
      const MB = 1024 * 1024;
      end.forEach((u, i) => {
        expect(u.rssBytes - baseline[i]!.rssBytes).toBeLessThan(200 * MB);
        expect(u.fds - baseline[i]!.fds).toBeLessThan(100);
      });

      const count = (s: number) => results.filter((r) => r.status === s).length;
      const notAnsweredBilled = results.filter((r) => !r.answered && r.requestId && billed.has(r.requestId));
      const byKind = new Map<string, number>();
      for (const r of notAnsweredBilled) {
        const k = `${r.status}:${r.code}:${billed.get(r.requestId!)}`;
        byKind.set(k, (byKind.get(k) ?? 0) + 1);
      }
      console.log('soak: billed but not answered, by status:code:credits', JSON.stringify([...byKind]));
      console.log(
        `soak ${SOAK_SECONDS} s: ${results.length} calls, ${answered.length} answered and billed ${PRICE} each ` +
          `(unbilled: ${unbilled.length}); 429 ${count(429)}, 503 ${count(503)}, 502 ${count(502)}, ` +
          `504 ${count(504)}, cut by the client or mid-stream ${results.filter((r) => r.status === 0 || (r.status === 200 && !r.answered)).length} ` +
          `(${notAnsweredBilled.length} of those billed for what they got); faults: ${seen.length} ` +
          `(${[...new Set(seen)].join(', ')}); RSS MB ${baseline.map((b) => Math.round(b.rssBytes / MB)).join('/')} → ` +
          `${end.map((u) => Math.round(u.rssBytes / MB)).join('/')}, fds ${baseline.map((b) => b.fds).join('/')} → ` +
          `${end.map((u) => u.fds).join('/')}`,
      );
    });
  },
);
