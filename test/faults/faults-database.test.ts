import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import {
  billedCalls,
  callChat,
  lastEntryId,
  orgLedger,
  sleep,
  waitUntil,
  type CallResult,
} from '../helpers/chat-load.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAs } from '../helpers/json.js';

// Svc (its own process, src/main.ts) reaches PostgreSQL through a TCP
// proxy of the test's own, which resets or black-holes the path under load. The process must not exit,
// every refusal is a 503 with Retry-After (never a 500), it recovers by itself, and the ledger stays
// exact: Σ debits == price × answered calls, no hold or lease left over.
//
// PostgreSQL only: the fault is a network path to a database server, which the embedded PGlite has not.

const PRICE = 20; // the fake's default reply: 10 prompt + 2 × 5 completion tokens (TEST_PRICES)

describe.runIf(storageMode() === 'postgres')(
  'the database path breaks under a running svc',
  { timeout: 90_000 },
  () => {
    let server: TestServer; // in this process, straight to the database: fixtures and the ledger's view
    let fake: FakeUpstream;
    let proxy: TcpProxy;
    let svc: ChildSvc;
    let owner: TestUser;
    let key: string;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      // Only svc's path is cut, not this process's, which declares no peer dead within the test: test
      // servers run with a 30 s liveness limit (test/helpers/server.ts).
      server = await startTestServer({ env: fake.env() });
      owner = await createUser(server);
      key = (await createApiToken(server, owner, owner.orgKey)).secret;
      await setOrgBalance(server, owner.orgKey, 1_000_000);
      proxy = await startTcpProxy({ host: '127.0.0.1', port: Number(new URL(server.databaseUrl!).port) });
      svc = await startChildSvc(
        fake.env({
          DATABASE_URL: proxy.urlFor(server.databaseUrl!),
          DATABASE_QUERY_TIMEOUT_MS: '1500',
          ORG_MAX_CONCURRENCY: '64',
          PROCESS_DEAD_AFTER_MS: '30000',
        }),
      );
    });
    afterAll(async () => {
      await svc?.kill();
      await proxy?.close();
      await server?.close();
      await fake?.close();
    });

    /** Calls in a loop from `workers` clients until `stop` resolves; every result kept in `results` as it comes. */
    async function load(workers: number, stop: Promise<void>, results: CallResult[]): Promise<CallResult[]> {
      let done = false;
      void stop.then(() => (done = true));
      await Promise.all(
        Array.from({ length: workers }, async (_, w) => {
          while (!done) {
            const r = await callChat(svc.url, key, { stream: w % 2 === 1 });
            results.push(r);
            if (r.status !== 200) await sleep(20); // paced: a refused client tries again a little later
          }
        }),
      );
      return results;
    }

    it('a connection reset under load: no exit, 503 with Retry-After (never 500), back by itself, every answered call billed once', async () => {
      // Calls in flight when the cut comes: their provider work is done while the database is gone.
      fake.headersDelayMs = 400;
      fake.chunkDelayMs = 60;
      const before = await orgLedger(server, owner.orgKey);
      const afterEntry = await lastEntryId(server);
      let stop!: () => void;
      const seen: CallResult[] = [];
      const running = load(8, new Promise<void>((r) => (stop = r)), seen);
      // The cut comes while calls wait at the provider, not whenever the timer falls (a loaded machine can
      // leave every worker in admission at that instant): a call seen in flight here is still in flight
      // at the cut (no timer runs in between), and its answer comes back within the 400 ms, while the
      // database is still cut, so its settle cannot be written.
      await waitUntil(() => fake.inFlight >= 2, 10_000);
      proxy.cut();
      // The database stays gone until what this test is about has happened: a call answered while its
      // settle could not be written, and calls refused with 503.
      await waitUntil(
        () =>
          svc.output().includes('settle not written; kept and retried') && seen.some((r) => r.status === 503),
        20_000,
      );
      expect(svc.alive()).toBe(true);
      proxy.heal();
      const healedAt = Date.now();
      const probes: CallResult[] = [];
      const back = await waitUntil(async () => {
        const probe = await callChat(svc.url, key);
        probes.push(probe);
        return probe.status === 200;
      }, 10_000);
      stop();
      const results = await running;
      fake.reset();

      expect(svc.alive(), svc.output()).toBe(true);
      const statuses = new Set(results.map((r) => r.status));
      expect([...statuses].filter((s) => s !== 200 && s !== 503)).toEqual([]);
      const refusals = results.filter((r) => r.status === 503);
      expect(refusals.length).toBeGreaterThan(0);
      expect(refusals.filter((r) => r.retryAfter === null)).toEqual([]);
      // No stream ended in an error event after its content: a whole answer, or a refusal before it.
      expect(results.filter((r) => r.status === 200 && !r.answered)).toEqual([]);
      console.log(
        `reset: ${results.length} calls, ${refusals.length} refused 503, back ${back} ms after heal`,
      );
      // Some calls were answered while their settle could not be written (the case this test is about).
      expect(svc.output()).toContain('settle not written; kept and retried');

      // The ledger: every answered call debited exactly once, nothing held, no lease left.
      const calls = [...results, ...probes];
      const answered = calls.filter((r) => r.answered);
      const unsigned = svc.output().split('outcome not signed').length - 1;
      console.log(
        `reset: ${answered.length} answered calls (${unsigned} without their outcome: not signable)`,
      );
      await waitUntil(async () => (await orgLedger(server, owner.orgKey)).openHolds === 0, 15_000);
      // Call by call: the calls debited are exactly the ones whose client got the whole answer, each once.
      // A call debited whose client got a refusal (503) or nothing shows here with what its client saw.
      const billed = await billedCalls(server, owner.orgKey, afterEntry);
      const byId = new Map(calls.flatMap((r) => (r.requestId ? [[r.requestId, r] as const] : [])));
      const billedNotAnswered = [...billed.keys()]
        .filter((id) => !byId.get(id)?.answered)
        .map((id) => ({ id, debited: billed.get(id), client: byId.get(id) ?? 'no answer with this id' }));
      expect(billedNotAnswered).toEqual([]);
      expect(answered.filter((r) => billed.get(r.requestId ?? '') !== PRICE)).toEqual([]);
      const after = await orgLedger(server, owner.orgKey);
      expect(after.debited - before.debited).toBe(PRICE * answered.length);
      expect(after.usageRows - before.usageRows).toBe(answered.length);
      // Capacity: every lease released within seconds of the database's return (failed releases retried).
      await waitUntil(async () => (await orgLedger(server, owner.orgKey)).liveLeases === 0, 5_000);
      console.log(
        `reset: every lease free ${Date.now() - healedAt} ms after the database's return (load included)`,
      );
      expect(await checkInvariants(server.deps.db)).toEqual([]);
    });

    it('a black-holed database: /readyz says 503 within its own limit, requests fail fast with 503, then recover', async () => {
      proxy.blackHole();
      try {
        const started = Date.now();
        const ready = await fetch(`${svc.url}/readyz`);
        const readyMs = Date.now() - started;
        expect(ready.status).toBe(503);
        expect(ready.headers.get('retry-after')).toBe('5');
        expect(readyMs).toBeLessThan(3_000);

        const calls = await Promise.all([callChat(svc.url, key), callChat(svc.url, key, { stream: true })]);
        for (const call of calls) {
          expect(call.status).toBe(503);
          expect(call.retryAfter).not.toBeNull();
          // The statement timeout (1.5 s here) and the connection timeout bound the wait, not the partition.
          expect(call.ms).toBeLessThan(9_000);
        }
      } finally {
        proxy.heal();
      }
      await waitUntil(async () => (await fetch(`${svc.url}/readyz`)).status === 200, 10_000);
      expect((await callChat(svc.url, key)).status).toBe(200);
      expect(svc.alive(), svc.output()).toBe(true);
    });

    it('a call billed when its outcome cannot be signed still gets its answer (never an error for a billed call)', async () => {
      // What the reset test above found on a loaded machine (1 run in 4): a fresh process reads its signing
      // keys on its first outcome, after the first settle; when the database fails in between, the call
      // was billed and its client got 503. Made certain here: the keys table is locked, so the child's
      // read of it runs into its statement timeout (1.5 s) while the settle, which does not touch it, lands.
      const fresh = await startChildSvc(
        fake.env({
          DATABASE_URL: server.databaseUrl!,
          DATABASE_QUERY_TIMEOUT_MS: '1500',
          PROCESS_DEAD_AFTER_MS: '30000',
        }),
      );
      const afterEntry = await lastEntryId(server);
      const locker = await server.deps.database.pool!.connect();
      let locked = true;
      try {
        await locker.query('begin');
        await locker.query('lock table oauth_signing_keys in access exclusive mode');
        const res = await fetch(`${fresh.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'any', messages: [{ role: 'user', content: 'hi' }] }),
          signal: AbortSignal.timeout(30_000),
        });
        const body = await res.text();
        await locker.query('rollback');
        locked = false;
        expect([res.status, body.includes('"choices"')]).toEqual([200, true]);
        expect(res.headers.get('x-svc-outcome')).toBeNull(); // not known to this process yet
        const billed = await billedCalls(server, owner.orgKey, afterEntry);
        expect([...billed]).toEqual([[res.headers.get('x-svc-request-id'), PRICE]]);
        expect(fresh.output()).toContain('outcome not signed');
        // Once the keys can be read, outcomes are signed again.
        const next = await fetch(`${fresh.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'any', messages: [{ role: 'user', content: 'hi' }] }),
        });
        await next.text();
        expect(next.status).toBe(200);
        expect(next.headers.get('x-svc-outcome')).not.toBeNull();
      } finally {
        if (locked) await locker.query('rollback');
        locker.release();
        await fresh.kill();
      }
    });

    it('settles that cannot be written by shutdown go to the spool, and the next start bills them exactly once', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'svc-spool-'));
      const spoolFile = join(dir, 'settle-spool.jsonl');
      const env = fake.env({
        DATABASE_URL: proxy.urlFor(server.databaseUrl!),
        DATABASE_QUERY_TIMEOUT_MS: '1500',
        ORG_MAX_CONCURRENCY: '64',
        PROCESS_DEAD_AFTER_MS: '30000',
        SETTLE_SPOOL_FILE: spoolFile,
      });
      const first = await startChildSvc(env);
      const before = await orgLedger(server, owner.orgKey);
      fake.headersDelayMs = 1_500;
      const sent = fake.requests.length;
      const calls = Promise.all([
        callChat(first.url, key),
        callChat(first.url, key),
        callChat(first.url, key, { stream: true }),
      ]);
      await waitUntil(() => fake.requests.length === sent + 3, 10_000); // held and at the provider
      proxy.cut();
      const results = await calls;
      fake.reset();
      // The work was done: every call answered 200 in full, though none could be settled.
      expect(results.map((r) => [r.status, r.answered])).toEqual([
        [200, true],
        [200, true],
        [200, true],
      ]);
      expect((await orgLedger(server, owner.orgKey)).debited).toBe(before.debited);

      const stopping = Date.now();
      first.proc.kill('SIGTERM');
      expect(await first.exited).toBe(0);
      console.log(`spool: shutdown with 3 unwritten settles took ${Date.now() - stopping} ms`);
      // The three settles (and the voids of the holds taken ahead that could not be given back).
      const spooled = readFileSync(spoolFile, 'utf8')
        .trim()
        .split('\n')
        .map((l) => parseAs<{ kind: string; input: { requestId: string } }>(l))
        .filter((w) => w.kind === 'settle');
      expect(spooled).toHaveLength(3);
      expect(spooled.map((w) => w.input.requestId).sort()).toEqual(results.map((r) => r.requestId).sort());

      proxy.heal();
      const second = await startChildSvc(env);
      try {
        await waitUntil(
          async () => (await orgLedger(server, owner.orgKey)).debited === before.debited + 3 * PRICE,
          10_000,
        );
        await waitUntil(() => readdirSync(dir).length === 0, 5_000); // the spool, replayed, is gone
        const after = await orgLedger(server, owner.orgKey);
        expect(after.usageRows - before.usageRows).toBe(3);
        // (a hold the other svc took ahead for the org goes back once its void's retry reaches the database)
        // Holds the earlier tests' killed children left stay until liveness reclaims them (30 s in this
        // file): this test leaves none of its own, so the org's count falls back to where it started.
        await waitUntil(
          async () => (await orgLedger(server, owner.orgKey)).openHolds <= before.openHolds,
          10_000,
        );
      } finally {
        second.proc.kill('SIGTERM');
        await second.exited;
      }
      expect(existsSync(spoolFile)).toBe(false);
      expect(await checkInvariants(server.deps.db)).toEqual([]);
    });
  },
);
