import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readdirSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import { Agent } from 'undici';
import { availableParallelism } from 'node:os';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { callChat, orgLedger, sleep, waitUntil, type CallResult } from '../helpers/chat-load.js';
import { ConfigError, loadConfig } from '../../src/config.js';
import { authenticateRunSocket } from '../helpers/run-socket.js';
import { eventually, eventuallyValue } from '../helpers/eventually.js';

// WEB_CONCURRENCY=2 runs two worker processes behind one port (src/cluster.ts). Billing
// and the organization's cap stay exact across them — proved with the ledger and the provider's own count
// of calls in flight —, a worker killed with -9 is replaced, and SIGTERM to the primary stops every worker
// gracefully. PostgreSQL only: the workers and this process share the database (PGlite is one process's).

const CAP = 4;
/** RUN_SOCKETS_PER_USER of the two-worker server: counted once for both workers. */
const SOCKETS = 2;

/** The svc worker processes under the primary (its other children, when it runs through tsx, are tsx's
 * esbuild services). A worker runs src/main.ts, or dist/src/main.js when the build is current. */
function workerPids(primary: number): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid !== primary) continue;
      if (/src\/main\.[jt]s\0/.test(readFileSync(`/proc/${entry}/cmdline`, 'utf8'))) pids.push(Number(entry));
    } catch {
      // the process ended while we looked
    }
  }
  return pids;
}

/** The 8-character process tag in a request id (`req_<tag>…`, src/models/slot/liveness.ts). */
const tagOf = (r: { requestId: string | null }) => r.requestId?.slice(4, 12);

/**
 * One chat call on a connection of its own. The cluster hands out connections, not requests, so calls
 * on a kept-alive connection all reach the same worker; a new connection may reach any.
 */
function callOnNewConnection(
  base: string,
  key: string,
): Promise<{ status: number; requestId: string | null }> {
  return new Promise((resolve) => {
    const req = request(
      `${base}/v1/chat/completions`,
      {
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', connection: 'close' },
        timeout: 30_000,
      },
      (res) => {
        res.resume();
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            requestId: (res.headers['x-svc-request-id'] as string) ?? null,
          }),
        );
      },
    );
    req.on('error', () => resolve({ status: 0, requestId: null }));
    req.end(JSON.stringify({ model: 'any', messages: [{ role: 'user', content: 'hi' }] }));
  });
}

const METRICS_TOKEN = 'metrics-token-for-the-cluster-test';

/** GET /metrics on a connection of its own. */
function scrapeOnNewConnection(base: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${base}/metrics`,
      { agent: false, headers: { authorization: `Bearer ${METRICS_TOKEN}`, connection: 'close' } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () =>
          res.statusCode === 200 ? resolve(body) : reject(new Error(`${res.statusCode}`)),
        );
      },
    );
    req.on('error', reject);
    req.end();
  });
}

describe('WEB_CONCURRENCY', () => {
  it('auto is the cores on PostgreSQL and 1 on the embedded database; a number above 1 needs PostgreSQL', () => {
    const pg = { DATABASE_URL: 'postgres://h/db' };
    expect(loadConfig({}).webConcurrency).toBe(1);
    expect(loadConfig({ ...pg, WEB_CONCURRENCY: '3' }).webConcurrency).toBe(3);
    expect(loadConfig({ ...pg, WEB_CONCURRENCY: 'auto' }).webConcurrency).toBe(availableParallelism());
    expect(loadConfig({ WEB_CONCURRENCY: 'auto' }).webConcurrency).toBe(1);
    expect(() => loadConfig({ WEB_CONCURRENCY: '2' })).toThrow(
      /WEB_CONCURRENCY: 2 worker processes need PostgreSQL/,
    );
    expect(() => loadConfig({ ...pg, WEB_CONCURRENCY: '0' })).toThrow(ConfigError);
    expect(() => loadConfig({ ...pg, WEB_CONCURRENCY: 'many' })).toThrow(/WEB_CONCURRENCY/);
  });
});

describe.runIf(storageMode() === 'postgres')('two worker processes on one port', { timeout: 180_000 }, () => {
  let server: TestServer;
  let fake: FakeUpstream;
  let owner: TestUser;
  let key: string;
  let svc: ChildSvc;
  let atStart: Awaited<ReturnType<typeof orgLedger>>;
  beforeAll(async () => {
    fake = await startFakeUpstream();
    // The default limit, as the workers have: this process is one of a killed worker's peers.
    server = await startTestServer({ env: fake.env({ PROCESS_DEAD_AFTER_MS: '4000' }) });
    owner = await createUser(server);
    key = (await createApiToken(server, owner, owner.orgKey)).secret;
    await setOrgBalance(server, owner.orgKey, 10_000_000);
    svc = await startChildSvc(
      fake.env({
        DATABASE_URL: server.databaseUrl!,
        WEB_CONCURRENCY: '2',
        ORG_MAX_CONCURRENCY: String(CAP),
        SHUTDOWN_GRACE_SECONDS: '20',
        METRICS_TOKEN,
        RUN_SOCKETS_PER_USER: String(SOCKETS),
      }),
    );
    atStart = await orgLedger(server, owner.orgKey);
  }, 150_000); // three svc processes start (the primary, then two workers one after the other)
  afterAll(async () => {
    if (svc?.alive()) svc.proc.kill('SIGKILL');
    for (const pid of svc ? workerPids(svc.proc.pid!) : []) process.kill(pid, 'SIGKILL');
    await server?.close();
    await fake?.close();
  });

  it('many concurrent calls over both workers: Σ usage == per-call debit × answered, the cap never exceeded', async () => {
    expect(svc.output()).toContain('2 worker processes');
    expect(workerPids(svc.proc.pid!)).toHaveLength(2);
    const start = await orgLedger(server, owner.orgKey);
    const one = await callChat(svc.url, key);
    expect(one.answered).toBe(true);
    // Its settle lands just after the answer.
    await waitUntil(
      async () => (await orgLedger(server, owner.orgKey)).usageRows === start.usageRows + 1,
      10_000,
    );
    const perCall = (await orgLedger(server, owner.orgKey)).debited - start.debited;
    expect(perCall).toBeGreaterThan(0);

    const before = await orgLedger(server, owner.orgKey);
    fake.headersDelayMs = 100; // calls overlap, so 12 lanes press on a cap of 4
    // Each lane (a kept-alive connection of its own, which the primary gave to one worker) makes calls
    // until 8 are answered, waiting a little after a 429 as a client told Retry-After would. A worker that
    // took all four slots keeps them (slot reuse, src/models/slot/concurrency.ts) while its own lanes have
    // calls: without the retries the other worker's lanes spent their eight calls on 429s in a few
    // milliseconds, and through fetch's shared pool a lane's calls went over any free connection, so the
    // worker holding the slots could answer them all.
    const lanes = await Promise.all(
      Array.from({ length: 12 }, async () => {
        const connection = new Agent({ connections: 1 });
        const results: CallResult[] = [];
        let answeredHere = 0;
        try {
          for (let attempt = 0; answeredHere < 8 && attempt < 400; attempt++) {
            const result = await callChat(svc.url, key, { stream: answeredHere % 2 === 1, connection });
            results.push(result);
            if (result.answered) answeredHere++;
            else if (result.status === 429)
              await sleep(20); // the scenario: a client retrying a little later
            else break; // anything else fails the test below
          }
        } finally {
          await connection.close();
        }
        return results;
      }),
    );
    fake.headersDelayMs = 0;
    const results = lanes.flat();
    const answered = results.filter((r) => r.answered);
    const refused = results.filter((r) => r.status === 429 && r.code === 'concurrency_limit');
    // Every call either answered whole or was refused by the cap before reaching the provider.
    expect(answered.length + refused.length).toBe(results.length);
    expect(answered).toHaveLength(12 * 8);
    // Both processes answered (each stamps its tag on its request ids).
    expect(new Set(answered.map(tagOf)).size).toBe(2);
    // The organization's cap held across the two processes, at the provider.
    expect(fake.maxInFlight).toBeLessThanOrEqual(CAP);

    // Nothing left held: the calls' holds settled, and each worker's hold taken ahead for the org's next
    // call (spare-holds.ts) given back after SPARE_IDLE_MS unused. (Comparing with the count before the
    // lanes was a race: that count may or may not include a spare, and spares come and go meanwhile.)
    await waitUntil(async () => {
      const now = await orgLedger(server, owner.orgKey);
      return now.openHolds === 0 && now.usageRows >= before.usageRows + answered.length;
    }, 15_000);
    const after = await orgLedger(server, owner.orgKey);
    expect(after.debited - before.debited).toBe(perCall * answered.length);
    expect(after.usageRows - before.usageRows).toBe(answered.length);
    console.log(
      `cluster: ${results.length} calls, ${answered.length} answered, ${refused.length} refused (cap ${CAP}); ` +
        `Σ usage ${after.debited - before.debited} = ${perCall} × ${answered.length}; max in flight ${fake.maxInFlight}`,
    );
  });

  it('/metrics answers for the whole cluster, whichever worker takes the scrape', async () => {
    // Every call of the test above is settled, so the ledger's usage since start is the cluster's total.
    const debited = (await orgLedger(server, owner.orgKey)).debited - atStart.debited;
    expect(debited).toBeGreaterThan(0);
    const seen: number[] = [];
    for (let i = 0; i < 6; i++) {
      // A connection of its own each time: the cluster may hand any of them to either worker.
      const text = await scrapeOnNewConnection(svc.url);
      seen.push(Number(/^svc_model_credits_debited_total (\d+)$/m.exec(text)?.[1]));
      // The database-wide gauges appear once, not once per worker.
      expect(text.match(/^svc_billing_holds_outstanding /gm)).toHaveLength(1);
    }
    // Each worker alone debited only part of it: only the sum over both equals the ledger every time.
    expect(seen).toEqual(Array(6).fill(debited));
  });

  it('run sockets: the per-user cap holds for the whole cluster, not per worker', async () => {
    // Each socket is a connection of its own, and the cluster hands connections out in turn: four
    // sockets reach both workers, so per-worker counting would admit all four.
    const sockets = [];
    for (let i = 0; i < 2 * SOCKETS; i++) sockets.push(await authenticateRunSocket(svc.url, key));
    const admitted = sockets.filter((s) => s.answer.type === 'authenticated');
    const refused = sockets.filter((s) => s.answer.type === 'error');
    expect(admitted).toHaveLength(SOCKETS);
    expect(refused.map((s) => s.answer)).toEqual(
      Array(SOCKETS).fill(expect.objectContaining({ code: 'too_many_sockets' })),
    );
    expect(await Promise.all(refused.map((s) => s.closed))).toEqual(Array(SOCKETS).fill(4429));
    // A close frees a place for whichever worker takes the next socket (the count is the primary's).
    admitted[0]!.ws.close();
    await admitted[0]!.closed;
    const next = await eventuallyValue(
      () => authenticateRunSocket(svc.url, key),
      (socket) => socket.answer.type === 'authenticated',
      5_000,
      'a socket admitted in the freed place',
      20,
    );
    for (const s of [admitted[1]!, next]) {
      s.ws.close();
      await s.closed;
    }
  });

  it('a worker killed with -9 is replaced, and the new one serves; its run sockets stop counting', async () => {
    // The cap is full, with sockets on either worker or both.
    const held: Awaited<ReturnType<typeof authenticateRunSocket>>[] = [];
    for (let i = 0; i < SOCKETS; i++) held.push(await authenticateRunSocket(svc.url, key));
    expect(held.map((s) => s.answer.type)).toEqual(Array(SOCKETS).fill('authenticated'));
    const [victim, survivor] = workerPids(svc.proc.pid!);
    const seen = new Set<string | undefined>();
    for (let i = 0; i < 6; i++) seen.add(tagOf(await callOnNewConnection(svc.url, key)));
    expect(seen.size).toBe(2);
    process.kill(victim!, 'SIGKILL');
    await waitUntil(() => {
      const now = workerPids(svc.proc.pid!);
      return now.length === 2 && !now.includes(victim!) && now.includes(survivor!);
    }, 60_000);
    // The replacement stamps a tag never seen before on the calls it answers.
    await waitUntil(async () => {
      const r = await callOnNewConnection(svc.url, key);
      return r.status === 200 && !seen.has(tagOf(r));
    }, 60_000);
    expect(svc.alive()).toBe(true);
    // The dead worker's sockets were cut; the primary counted them out with it, so as many new ones fit.
    // Each held socket shows where it was: cut with its worker, or answering a ping on the survivor.
    const pongsBefore = held.map((s) => s.pongs());
    for (const s of held) if (s.ws.readyState === s.ws.OPEN) s.ws.ping();
    await eventually(
      () => held.every((s, i) => s.ws.readyState === s.ws.CLOSED || s.pongs() > pongsBefore[i]!),
      10_000,
      'each held socket cut or answering',
    );
    const survivors = held.filter((s) => s.ws.readyState === s.ws.OPEN);
    if (survivors.length === SOCKETS) {
      // Both sockets were on the survivor: nothing was cut, and the cap is still full.
      expect(survivors).toHaveLength(SOCKETS);
    } else {
      for (let i = survivors.length; i < SOCKETS; i++) {
        const fresh = await authenticateRunSocket(svc.url, key);
        expect(fresh.answer.type).toBe('authenticated');
        survivors.push(fresh);
      }
    }
    const over = await authenticateRunSocket(svc.url, key);
    expect(over.answer).toMatchObject({ type: 'error', code: 'too_many_sockets' });
    for (const s of survivors) s.ws.close();
  });

  it('SIGTERM to the primary: the stream in flight finishes, every worker exits, exit 0', async () => {
    const workers = workerPids(svc.proc.pid!);
    fake.chunkDelayMs = 300; // a stream of about 1.5 s
    const stream = callChat(svc.url, key, { stream: true });
    await waitUntil(() => fake.inFlight > 0, 10_000);
    svc.proc.kill('SIGTERM');
    const done = await stream;
    expect([done.status, done.answered]).toEqual([200, true]);
    expect(await svc.exited).toBe(0);
    fake.reset();
    for (const pid of workers) expect(() => process.kill(pid, 0)).toThrow();
    // (That a draining worker refuses new requests is the single process's behaviour: faults-shutdown.)
  });
});
