// `npm run bench -- cluster`: the proxy path (JSON chat calls with auth, the concurrency lease and exact
// billing) through svc started as `npm start` starts it (src/main.ts), once with WEB_CONCURRENCY=1 and once
// with 2 (src/cluster.ts), against the same fake provider, in one run. Figures: max req/s at
// BENCH_CONNECTIONS connections (128; BENCH_CALLS calls) from one organization and spread over BENCH_ORGS
// organizations, and p50/p99 latency at a paced 200 req/s (for BENCH_SECONDS) from the one.
// The load generator, the fake provider and PostgreSQL share the machine's cores with svc, so the raw
// ratio 2 workers / 1 worker cannot show what a second core gives. Each max phase therefore also reads
// where the CPU went (bench/cluster-cpu.ts) and prints "two cores' worth" (bench/README.md § cluster,
// docs/decisions/0152-cluster-scaling-measured-per-core.md):
//   2 × (calls/s per core left to svc and its PostgreSQL backends, 2 workers)
//     ÷ (calls/s per core svc and its backends used, 1 worker)
// where a core left = the machine's cores − the load generator's, the fake's and every other process's.
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
import { childPids, startPhaseCpu, type PhaseCpu } from './cluster-cpu.js';
import { availableParallelism, loadavg } from 'node:os';
import pg from 'pg';

const LOCAL_POSTGRES = 'postgres://postgres@127.0.0.1:5432/test';

async function postgresUrl(): Promise<string | undefined> {
  const url = namedDatabaseUrl() ?? LOCAL_POSTGRES;
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
// 10,000: a phase of a few seconds on a fast machine (at 3,000 a phase lasted a second there, and its CPU
// per call was the JIT's as much as svc's).
const calls = knob('BENCH_CALLS', 10_000, 64);
// Seconds of load on each svc before its first phase, as bench/proxy.ts warms each target: every worker
// compiles the hot path for itself, and a warm-up of 160 calls left the first phases measuring that
// (one worker, one org: 500 µs of svc CPU per call against 221 µs warmed with 9,600 calls).
const warmup = knob('BENCH_WARMUP', 3, 0);
// Callers of the max phases: enough to keep two processes busy. At 32, two workers had 16 calls each and
// used under half a core apiece, so their batches were half as full as one worker's and their CPU per
// call 1.7–1.8 times as high: the phase measured idle workers, not what a second core gives
// (docs/decisions/0168-the-most-is-read-with-more-callers.md).
const maxConnections = knob('BENCH_CONNECTIONS', 128, 32);
// Organizations of the spread phase: each has its own account row, so their settles never wait on each other.
const orgCount = knob('BENCH_ORGS', 16, 2);
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
// This process only creates the accounts and reads the ledger; the svc measured is the child.
const setup = await startTestServer({ env: providerEnv });
const orgs: { orgKey: string; token: string }[] = [];
for (let i = 0; i <= orgCount; i++) {
  const user = await createUser(setup);
  orgs.push({ orgKey: user.orgKey, token: (await createApiToken(setup, user, user.orgKey)).secret });
  await setOrgBalance(setup, user.orgKey, 1_000_000_000);
}
const hot = orgs[0]!;
const spread = orgs.slice(1).map((o) => o.token);
const ledger = async () => {
  const all = await Promise.all(orgs.map((o) => orgLedger(setup, o.orgKey)));
  return {
    debited: all.reduce((a, l) => a + l.debited, 0),
    usageRows: all.reduce((a, l) => a + l.usageRows, 0),
  };
};

const monitor = new pg.Client({ connectionString: admin });
monitor.on('error', () => {});
await monitor.connect();
const svcDatabase = new URL(setup.databaseUrl!);
const postgresPort = Number(svcDatabase.port || 5432);

const body = JSON.stringify({
  model: 'gpt-4o-mini',
  max_tokens: 64,
  messages: [{ role: 'user', content: 'Tell me about foxes.' }],
});
const run = (url: string, opts: Record<string, unknown>, rotate?: string[]) =>
  new Promise<Result>((resolve, reject) => {
    let n = 0;
    const requests = rotate && [
      {
        setupRequest: (r: { headers: Record<string, string> }) => {
          r.headers = { ...r.headers, authorization: `Bearer ${rotate[n++ % rotate.length]}` };
          return r;
        },
      },
    ];
    autocannon(
      {
        url: `${url}/v1/chat/completions`,
        method: 'POST',
        headers: { authorization: `Bearer ${hot.token}`, 'content-type': 'application/json' },
        body,
        duration: seconds,
        // A phase of `amount` calls ends at autocannon's next sample tick after its last answer (by
        // default once a second), and its rate is calls over the phase's wall time: with ticks a second
        // apart every rate came out as the calls over a whole number of seconds (bench/README.md).
        sampleInt: 10,
        ...(requests ? { requests } : {}),
        ...opts,
      } as never,
      (err: Error | null, r: Result) => (err ? reject(err) : resolve(r)),
    );
  });

interface MaxPhase {
  rate: number;
  calls: number;
  cpu: PhaseCpu;
}
const cores = availableParallelism();
const rows: Record<string, Record<string, string | number>> = {};
const cpuRows: Record<string, Record<string, string | number>> = {};
const waitRows: Record<string, Record<string, string>> = {};
const measured: Record<string, Record<number, MaxPhase>> = {};
const maxPhases = ['1 org', `${orgCount} orgs`];
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
  const label = `${workers} worker${workers > 1 ? 's' : ''}`;
  try {
    // svc's processes: the one, or the primary and its workers (src/cluster.ts).
    const svcPids = [svc.proc.pid!, ...childPids(svc.proc.pid!)];
    if (svcPids.length !== (workers > 1 ? workers + 1 : 1))
      throw new Error(`svc with ${workers} workers runs as ${svcPids.length} processes`);
    const before = await ledger();
    const one = await callChat(svc.url, hot.token);
    if (!one.answered) throw new Error(`svc with ${workers} workers did not answer: ${one.status}`);
    // A settle lands just after the answer: wait (bounded) for the ledger to have every call's usage row.
    const settled = (rows: number) => waitUntil(async () => (await ledger()).usageRows >= rows, 30_000);
    await settled(before.usageRows + 1).catch((err: Error) => {
      throw new Error(
        `${err.message}: the first call's usage never reached the ledger (${setup.databaseUrl}, ${one.requestId})\n${svc.output()}`,
      );
    });
    const perCall = (await ledger()).debited - before.debited;

    const start = await ledger();
    let ok = 0;
    // Rounds of a fixed number of calls, so that every warm-up call is counted in the ledger check too.
    const warmUntil = Date.now() + warmup * 1000;
    while (Date.now() < warmUntil) ok += (await run(svc.url, { connections: 32, amount: 1600 }))['2xx'];
    const measure = async (name: string, opts: Record<string, unknown>, rotate?: string[]) => {
      const end = await startPhaseCpu(
        monitor,
        svcPids,
        fake.child.pid!,
        postgresPort,
        svcDatabase.pathname.slice(1),
      );
      const r = await run(svc.url, opts, rotate);
      const cpu = await end();
      (measured[name] ??= {})[workers] = {
        rate: r.requests.total / (cpu.wallUs / 1e6),
        calls: r.requests.total,
        cpu,
      };
      return r;
    };
    const maxLoad = { connections: maxConnections, amount: calls };
    const maxOne = await measure('1 org', maxLoad);
    const maxSpread = await measure(`${orgCount} orgs`, maxLoad, spread);
    // Paced, each worker has half the calls of one: CPU per call here against max load tells what a
    // process's own batching saves when busy (the same for one worker at a lower rate) from what two
    // processes cost each other.
    const paced = await measure('paced 200/s, 1 org', {
      connections: 16,
      overallRate: 200,
      amount: 200 * seconds,
    });
    ok += maxOne['2xx'] + maxSpread['2xx'] + paced['2xx'];
    await settled(start.usageRows + ok).catch(() => undefined); // a mismatch is reported below
    const end = await ledger();
    const debited = end.debited - start.debited;
    const phases = [maxOne, maxSpread, paced];
    const row = {
      // A phase is a count of calls, not a duration: its rate is calls over the time they took.
      'max req/s, 1 org': Math.round(measured['1 org']![workers]!.rate),
      [`max req/s, ${orgCount} orgs`]: Math.round(measured[`${orgCount} orgs`]![workers]!.rate),
      'p50 ms @200/s': paced.requests.total ? paced.latency.p50 : 'none done',
      'p99 ms @200/s': paced.requests.total ? paced.latency.p99 : 'none done',
      errors: phases.reduce((a, p) => a + p.errors + p.non2xx, 0),
      'Σ usage': debited,
      'per call × 2xx': perCall * ok,
      'usage rows': end.usageRows - start.usageRows,
    };
    rows[label] = row;
    if (perCall <= 0 || debited !== perCall * ok || row['usage rows'] !== ok || row.errors > 0) exact = false;
    for (const [name, byWorkers] of Object.entries(measured)) {
      const { cpu, calls: n } = byWorkers[workers]!;
      const asCores = (us: number) => (us / cpu.wallUs).toFixed(2);
      const svcUs = cpu.svcUs.reduce((a, b) => a + b, 0);
      cpuRows[`${label}, ${name}`] = {
        'svc µs/call': Math.round(svcUs / n),
        'svc+PG µs/call': Math.round((svcUs + cpu.postgresUs) / n),
        'svc kernel share': `${Math.round((100 * cpu.svcSystemUs) / svcUs)}%`,
        'svc waits/call': (cpu.svcWakeups / n).toFixed(2),
        'svc cores (each process)': cpu.svcUs.map(asCores).join(' + '),
        'PG cores': asCores(cpu.postgresUs),
        'generator cores': asCores(cpu.generatorUs),
        'fake cores': asCores(cpu.fakeUs),
        'other cores': asCores(cpu.otherUs),
        'PG backends': cpu.backends,
        'commits/call': (cpu.commits / n).toFixed(2),
      };
      // Average number of svc's backends in each state, the largest three.
      waitRows[`${label}, ${name}`] = Object.fromEntries(
        [...cpu.waits]
          .sort((a, b) => b[1] - a[1])
          .slice(0, 4)
          .map(([w, n]) => [w, n.toFixed(2)]),
      );
    }
  } finally {
    svc.proc.kill('SIGTERM');
    await svc.exited;
  }
}
await monitor.end();
await setup.close();
await stopChild(fake.child);

process.stdout.write(
  `\ncluster bench (${calls} calls per max phase, ${seconds}s paced; PostgreSQL; node ${process.version}; ` +
    `${cores} cores; load average ${loadavg()[0]!.toFixed(2)})\n`,
);
console.table(rows);
process.stdout.write('CPU of each phase, in cores (CPU seconds per second of the phase):\n');
console.table(cpuRows);
process.stdout.write("svc's PostgreSQL backends at work, on average, by what they wait on (sampled):\n");
for (const [phase, w] of Object.entries(waitRows))
  process.stdout.write(
    `  ${phase}: ${Object.entries(w)
      .map(([k, n]) => `${k} ${n}`)
      .join(', ')}\n`,
  );
for (const name of maxPhases) {
  const byWorkers = measured[name]!;
  const one = byWorkers[1]!;
  const two = byWorkers[2]!;
  const used = (p: MaxPhase) => (p.cpu.svcUs.reduce((a, b) => a + b, 0) + p.cpu.postgresUs) / p.cpu.wallUs;
  const left = (p: MaxPhase) => cores - (p.cpu.generatorUs + p.cpu.fakeUs + p.cpu.otherUs) / p.cpu.wallUs;
  // Two cores' worth (decision 0152): per core svc and its backends could have had with 2 workers,
  // against per core they used with 1 — times 2, so that 2.00× is two workers each as good as one.
  const worth = (2 * (two.rate / left(two))) / (one.rate / used(one));
  const perCall = (p: MaxPhase) => (p.cpu.svcUs.reduce((a, b) => a + b, 0) + p.cpu.postgresUs) / p.calls;
  process.stdout.write(
    `${name}: 2 workers / 1 worker ${(two.rate / one.rate).toFixed(2)}× raw; ` +
      `two cores' worth ${worth.toFixed(2)}× (2 workers used ${used(two).toFixed(2)} of ${left(two).toFixed(2)} ` +
      `cores left to svc+PG; svc+PG CPU per call ×${(perCall(two) / perCall(one)).toFixed(2)} of 1 worker's)\n`,
  );
  // CPU per call grows with the machine's other load (preemption, caches): by a third or more in runs
  // here with a core's worth of other work. Phases that met different loads do not compare.
  const otherCores = (p: MaxPhase) => p.cpu.otherUs / p.cpu.wallUs;
  if (Math.abs(otherCores(two) - otherCores(one)) > 0.25)
    process.stdout.write(
      `  (the rest of the machine took ${otherCores(one).toFixed(2)} cores with 1 worker and ` +
        `${otherCores(two).toFixed(2)} with 2: this pair does not compare; run it again on a quieter machine)\n`,
    );
}
if (!exact) {
  process.stdout.write('cluster bench: the ledger does not match the answers (or calls failed)\n');
  process.exitCode = 1;
} else process.stdout.write('cluster bench: ledger exact in both phases (Σ usage == per-call debit × 2xx)\n');
