// `npm run bench -- ab`: one change to svc's chat path measured against what it replaces, in one run.
// Two svc processes (the proxy bench's svc child: bench/proxy.ts) serve the same fake provider side by
// side: side A and side B, each from a checkout of its own (BENCH_AB_A_TREE, BENCH_AB_B_TREE: the
// repository root of another worktree; default this one) and with environment of its own
// (BENCH_AB_A_ENV, BENCH_AB_B_ENV: `NAME=value,NAME=value`), beside the provider alone (`direct`) and
// the settled floor (bench/floor-proxy.ts). The four take turns in blocks, the order reversed every
// round, so a drift of this VM falls on both sides alike; a speed trick's figure in docs/models.md
// ("Speed tricks") is such a pair of sides.
//
// BENCH_AB_MODE=json (default): non-streamed calls paced open-loop at BENCH_AB_RATE per second
// (bench/proxy-paced.ts's row); BENCH_AB_MODE=first-byte: streamed calls one at a time, timed to their
// first byte, BENCH_AB_GAP_MS apart (a gap over 250 ms makes every call take a fresh concurrency slot:
// src/models/slot/concurrency.ts slot reuse). BENCH_AB_BLOCK calls per block (the first ten unrecorded),
// BENCH_AB_ROUNDS rounds after a warm-up round. BENCH_AB_B_SQL: a statement run on side B's database
// once it serves (a setting of one function, say). Per target: p50/p90/p99 and their excess over
// `direct`, and CPU per call of the process that answers (svc's, the floor's; for `direct` the fake
// provider's: a bare Node.js HTTP server's cost at the same pace) and of the PostgreSQL backends serving
// that process's own connections (bench/proc-cpu.ts; found by their client ports, so other work on the
// machine's PostgreSQL is not counted, nor are its shared processes: WAL writer, checkpointer).
// `BENCH_CPU_PROF=<file>` in a side's environment writes that side's V8 CPU profile (bench/cpu-profile.ts).
// BENCH_AB_TRACES=1: tracing off on side A, on on side B (CONTRACT §1): B exports its spans over OTLP/HTTP
// (the default protobuf) to a sink this process serves, which answers 200 and counts what came; the run
// fails when B exported nothing. Both sides otherwise alike: the cost of tracing on, per call.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { request } from 'undici';
import { repoRoot, startChild, stopChild, type ProxySvcInfo } from './children.js';
import { knob, namedDatabaseUrl } from './knobs.js';
import { backendsSpentUs, ownBackendsCpuUs, processCpuUs } from './proc-cpu.js';
import { callFailed, pacedBlock, percentile, reportFailures } from './proxy-paced.js';
import { startOtlpSink } from './otlp-sink.js';

const databaseUrl = namedDatabaseUrl() ?? 'postgres://postgres@127.0.0.1:5432/test';
const firstByte = process.env.BENCH_AB_MODE === 'first-byte';
const rate = knob('BENCH_AB_RATE', 200, 200);
const block = knob('BENCH_AB_BLOCK', 200, 20);
const rounds = knob('BENCH_AB_ROUNDS', 10, 1);
const gapMs = knob('BENCH_AB_GAP_MS', 0, 0);
const WARM = 10;

const here = (file: string) => fileURLToPath(new URL(file, import.meta.url));
const envOf = (spec = '') =>
  Object.fromEntries(
    spec
      .split(',')
      .filter(Boolean)
      .map((pair) => {
        const at = pair.indexOf('=');
        return [pair.slice(0, at), pair.slice(at + 1)];
      }),
  );

/** One svc side: the proxy bench's svc child from `tree` (a repository root), with `env` added. */
function startSide(tree: string | undefined, env: string | undefined, fakeUrl: string) {
  return startChild<ProxySvcInfo>(['--import', 'tsx', join(tree ?? repoRoot, 'bench/proxy.ts')], {
    BENCH_ROLE: 'svc',
    FAKE_URL: fakeUrl,
    TEST_DATABASE_URL: databaseUrl,
    ...envOf(env),
  });
}

/** The database side B's svc made (test/helpers/server.ts names one per server; B started last). */
async function runOnNewestSvcDatabase(statement: string) {
  const admin = new pg.Client({ connectionString: databaseUrl });
  await admin.connect();
  const { rows } = await admin.query<{ datname: string }>(
    "select datname from pg_database where datname like 'svc_t_%' order by oid desc limit 1",
  );
  await admin.end();
  const url = new URL(databaseUrl);
  url.pathname = `/${rows[0]!.datname}`;
  const b = new pg.Client({ connectionString: url.toString() });
  await b.connect();
  await b.query(statement);
  await b.end();
}

const postgresPort = Number(new URL(databaseUrl).port || 5432);
const monitor = new pg.Client({ connectionString: databaseUrl });
monitor.on('error', () => {});
await monitor.connect();

const sink = process.env.BENCH_AB_TRACES === '1' ? await startOtlpSink() : null;
const tracedEnv = sink
  ? `OTEL_EXPORTER_OTLP_ENDPOINT=${sink.url},OTEL_SERVICE_NAME=svc-bench-b${process.env.BENCH_AB_B_ENV ? ',' : ''}`
  : '';
const fake = await startChild(['--import', 'tsx', here('./proxy.ts')], { BENCH_ROLE: 'fake' });
const sideA = await startSide(process.env.BENCH_AB_A_TREE, process.env.BENCH_AB_A_ENV, fake.info.url);
const sideB = await startSide(
  process.env.BENCH_AB_B_TREE,
  tracedEnv + (process.env.BENCH_AB_B_ENV ?? ''),
  fake.info.url,
);
if (process.env.BENCH_AB_B_SQL) await runOnNewestSvcDatabase(process.env.BENCH_AB_B_SQL);
const floor = await startChild(['--import', 'tsx', here('./floor-proxy.ts')], {
  FLOOR_DATABASE_URL: databaseUrl,
  FAKE_URL: fake.info.url,
});
const { FAKE_KEY } = await import('../test/helpers/fake-upstream.js');

interface Target {
  name: string;
  url: string;
  auth: string;
  /** The process that answers: its CPU is counted, and the PostgreSQL backends of its connections. */
  pid: number;
}
const targets: Target[] = [
  { name: 'direct', url: `${fake.info.url}/chat/completions`, auth: FAKE_KEY, pid: fake.child.pid! },
  {
    name: 'settled floor',
    url: `${floor.info.url}/settled/v1/chat/completions`,
    auth: FAKE_KEY,
    pid: floor.child.pid!,
  },
  { name: 'A', url: `${sideA.info.url}/v1/chat/completions`, auth: sideA.info.token, pid: sideA.child.pid! },
  { name: 'B', url: `${sideB.info.url}/v1/chat/completions`, auth: sideB.info.token, pid: sideB.child.pid! },
];
const body = JSON.stringify({
  model: 'gpt-4o-mini',
  stream: firstByte,
  max_tokens: 64,
  messages: [{ role: 'user', content: 'Tell me about foxes.' }],
});
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One call: ms to its first byte (a stream) or its last (JSON). */
async function call(t: Target): Promise<number> {
  const sent = performance.now();
  const res = await request(t.url, {
    method: 'POST',
    headers: { authorization: `Bearer ${t.auth}`, 'content-type': 'application/json' },
    body,
  });
  let first = 0;
  const failed = res.statusCode !== 200;
  const kept: Buffer[] = []; // a failed call's body, for its error
  for await (const chunk of res.body) {
    if (!first && (chunk as Buffer).length) first = performance.now();
    if (failed) kept.push(chunk as Buffer);
  }
  if (failed) throw callFailed(t.name, res.statusCode, Buffer.concat(kept));
  return (firstByte ? first : performance.now()) - sent;
}

/** One block of `block` recorded calls (after WARM): one at a time, or paced open-loop at `rate`. */
async function runBlock(t: Target): Promise<number[]> {
  if (!firstByte) {
    const paced = await pacedBlock({ name: t.name, call: () => call(t).then(() => {}) }, rate, block, WARM);
    if (paced.errors) {
      reportFailures(t.name, paced.errors, paced.failures);
      throw new Error(`${t.name}: ${paced.errors} calls failed (the first ${paced.failures.length} above)`);
    }
    return paced.times;
  }
  const times: number[] = [];
  for (let i = 0; i < WARM + block; i++) {
    const ms = await call(t);
    if (i >= WARM) times.push(ms);
    if (gapMs) await sleep(gapMs);
  }
  return times;
}

const times = new Map(targets.map((t) => [t.name, [] as number[]]));
const cpu = new Map(targets.map((t) => [t.name, { process: 0, postgres: 0, calls: 0 }]));
try {
  for (let round = -1; round < rounds; round++) {
    for (const t of round % 2 ? [...targets].reverse() : targets) {
      const processBefore = processCpuUs(t.pid);
      const pgBefore = await ownBackendsCpuUs(monitor, t.pid, postgresPort);
      const recorded = await runBlock(t);
      if (round < 0) continue; // the warm-up round
      times.get(t.name)!.push(...recorded);
      const c = cpu.get(t.name)!;
      c.process += processCpuUs(t.pid) - processBefore;
      c.postgres += backendsSpentUs(pgBefore, await ownBackendsCpuUs(monitor, t.pid, postgresPort));
      c.calls += WARM + block;
    }
  }
} finally {
  await Promise.all([sideA, sideB, floor, fake].map((c) => stopChild(c.child)));
  await sink?.close();
  await monitor.end();
}

const direct = times.get('direct')!.sort((a, b) => a - b);
const what = firstByte
  ? `first byte, one call at a time${gapMs ? `, ${gapMs} ms apart` : ''}`
  : `JSON paced at ${rate}/s`;
process.stdout.write(`\nab bench (${what}; ${rounds} rounds of ${block} per target)\n`);
console.table(
  Object.fromEntries(
    targets.map((t) => {
      const sorted = times.get(t.name)!.sort((a, b) => a - b);
      const c = cpu.get(t.name)!;
      return [
        t.name,
        {
          'p50 ms': +percentile(sorted, 0.5).toFixed(2),
          'p90 ms': +percentile(sorted, 0.9).toFixed(2),
          'p99 ms': +percentile(sorted, 0.99).toFixed(2),
          'adds p50 ms': +(percentile(sorted, 0.5) - percentile(direct, 0.5)).toFixed(2),
          'adds p99 ms': +(percentile(sorted, 0.99) - percentile(direct, 0.99)).toFixed(2),
          'process CPU µs/call': Math.round(c.process / c.calls),
          'PostgreSQL backends CPU µs/call': Math.round(c.postgres / c.calls),
        },
      ];
    }),
  ),
);
if (sink) {
  process.stdout.write(
    `\nside B traced: ${sink.exports} OTLP exports, ${(sink.bytes / 1024).toFixed(0)} KB (side A untraced)\n`,
  );
  if (sink.exports === 0) {
    process.stderr.write('side B exported no spans: tracing did not start\n');
    process.exitCode = 1;
  }
}
