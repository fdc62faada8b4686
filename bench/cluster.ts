// `npm run bench -- cluster`: the proxy path (JSON chat calls with auth, the concurrency lease and exact
// billing) through svc started as `npm start` starts it (src/main.ts), once with WEB_CONCURRENCY=1 and once
// with 2 (src/cluster.ts), against the same fake provider, in one run. Figures: max req/s at 32
// connections (BENCH_CALLS calls), and p50/p99 latency at a paced 200 req/s (for BENCH_SECONDS); the
// ratio line is 2 workers / 1 worker.
// Exactness: after each phase, Σ usage in the ledger == per-call debit × the 2xx answers autocannon counted.
//
// Several workers need PostgreSQL (PGlite is one process's): TEST_DATABASE_URL or DATABASE_URL when set,
// else this machine's postgres://postgres@127.0.0.1:5432/test when it answers (as bench/proxy.ts). With
// none, the bench says so and exits 0 — there is nothing it could measure.
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Result } from 'autocannon';
import { startChild, stopChild } from './children.js';
import { knob, namedDatabaseUrl } from './knobs.js';

const LOCAL_POSTGRES = 'postgres://postgres@127.0.0.1:5432/test';

async function postgresUrl(): Promise<string | undefined> {
  const url = namedDatabaseUrl() ?? LOCAL_POSTGRES;
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('select 1');
    return url;
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => {});
  }
}

const admin = await postgresUrl();
if (!admin) {
  process.stdout.write('cluster bench: no PostgreSQL answers (several workers need it); nothing measured\n');
  process.exit(0);
}
// The test helpers create a fresh database under this one (test/helpers/server.ts).
process.env.TEST_DATABASE_URL = admin;

const { default: autocannon } = await import('autocannon');
const { startTestServer } = await import('../test/helpers/server.js');
const { createUser, createApiToken } = await import('../test/helpers/fixtures.js');
const { setOrgBalance } = await import('../test/helpers/billing.js');
const { FAKE_KEY, TEST_PRICES } = await import('../test/helpers/fake-upstream.js');
const { startChildSvc } = await import('../test/helpers/child-svc.js');
const { orgLedger, callChat, waitUntil } = await import('../test/helpers/chat-load.js');

const seconds = knob('BENCH_SECONDS', 5, 1);
// A fixed number of calls per phase, not a duration: autocannon then waits for every answer, so each call
// svc billed is one it counted (a timed phase ends with calls in flight that svc still answers and bills).
const calls = knob('BENCH_CALLS', 3000, 64);
const warmup = knob('BENCH_WARMUP', 1, 0);
const children: ChildProcess[] = [];
process.on('exit', () => children.forEach((c) => c.kill('SIGKILL')));

// The provider: bench/proxy.ts's fake, in its own process.
const fake = await startChild(['--import', 'tsx', fileURLToPath(new URL('./proxy.ts', import.meta.url))], {
  BENCH_ROLE: 'fake',
});
children.push(fake.child);
// The tests' prices: every call costs whole tokens, so the ledger check below means something.
const providerEnv = {
  MODEL_UPSTREAM_URL: fake.info.url,
  MODEL_UPSTREAM_KEY: FAKE_KEY,
  MODEL_ID: 'bench-model',
  ...TEST_PRICES,
};
// This process only creates the account and reads the ledger; the svc measured is the child.
const setup = await startTestServer({ env: providerEnv });
const user = await createUser(setup);
const token = (await createApiToken(setup, user, user.orgKey)).secret;
await setOrgBalance(setup, user.orgKey, 1_000_000_000);

const body = JSON.stringify({
  model: 'gpt-4o-mini',
  max_tokens: 64,
  messages: [{ role: 'user', content: 'Tell me about foxes.' }],
});
const run = (url: string, opts: Record<string, unknown>) =>
  new Promise<Result>((resolve, reject) =>
    autocannon(
      {
        url: `${url}/v1/chat/completions`,
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body,
        duration: seconds,
        ...opts,
      } as never,
      (err: Error | null, r: Result) => (err ? reject(err) : resolve(r)),
    ),
  );

const rows: Record<string, Record<string, string | number>> = {};
let exact = true;
for (const workers of [1, 2]) {
  const svc = await startChildSvc({
    ...providerEnv,
    DATABASE_URL: setup.databaseUrl!,
    WEB_CONCURRENCY: String(workers),
    ORG_MAX_CONCURRENCY: '1024',
    LOG_LEVEL: 'warn',
  });
  children.push(svc.proc);
  try {
    const before = await orgLedger(setup, user.orgKey);
    const one = await callChat(svc.url, token);
    if (!one.answered) throw new Error(`svc with ${workers} workers did not answer: ${one.status}`);
    // A settle lands just after the answer: wait (bounded) for the ledger to have every call's usage row.
    const settled = (rows: number) =>
      waitUntil(async () => (await orgLedger(setup, user.orgKey)).usageRows >= rows, 30_000);
    await settled(before.usageRows + 1).catch((err: Error) => {
      throw new Error(
        `${err.message}: the first call's usage never reached the ledger (${setup.databaseUrl}, ${one.requestId})\n${svc.output()}`,
      );
    });
    const perCall = (await orgLedger(setup, user.orgKey)).debited - before.debited;

    const start = await orgLedger(setup, user.orgKey);
    let ok = 0;
    if (warmup) ok += (await run(svc.url, { connections: 16, amount: 16 * warmup * 10 }))['2xx'];
    const max = await run(svc.url, { connections: 32, amount: calls });
    const paced = await run(svc.url, { connections: 16, overallRate: 200, amount: 200 * seconds });
    ok += max['2xx'] + paced['2xx'];
    await settled(start.usageRows + ok).catch(() => undefined); // a mismatch is reported below
    const end = await orgLedger(setup, user.orgKey);
    const debited = end.debited - start.debited;
    const row = {
      // The phase is a count of calls, not a duration: its rate is calls over the time they took
      // (autocannon's per-second average is taken over BENCH_SECONDS ticks, so it read calls / seconds).
      'max req/s': Math.round(max.requests.total / max.duration),
      'p50 ms @200/s': paced.requests.total ? paced.latency.p50 : 'none done',
      'p99 ms @200/s': paced.requests.total ? paced.latency.p99 : 'none done',
      errors: max.errors + max.non2xx + paced.errors + paced.non2xx,
      'Σ usage': debited,
      'per call × 2xx': perCall * ok,
      'usage rows': end.usageRows - start.usageRows,
    };
    rows[`${workers} worker${workers > 1 ? 's' : ''}`] = row;
    if (perCall <= 0 || debited !== perCall * ok || row['usage rows'] !== ok || row.errors > 0) exact = false;
  } finally {
    svc.proc.kill('SIGTERM');
    await svc.exited;
  }
}
await setup.close();
await stopChild(fake.child);

process.stdout.write(
  `\ncluster bench (${seconds}s per load phase; PostgreSQL; node ${process.version}; ` +
    `${(await import('node:os')).availableParallelism()} cores)\n`,
);
console.table(rows);
const ratio = Number(rows['2 workers']!['max req/s']) / Number(rows['1 worker']!['max req/s']);
process.stdout.write(`2 workers / 1 worker max throughput: ${ratio.toFixed(2)}×\n`);
if (!exact) {
  process.stdout.write('cluster bench: the ledger does not match the answers (or calls failed)\n');
  process.exitCode = 1;
} else process.stdout.write('cluster bench: ledger exact in both phases (Σ usage == per-call debit × 2xx)\n');
