// `npm run bench -- verify`: GET /v1/auth/verify (svc_ token → HMAC → one indexed read joining the
// token, its user and the live membership) beside a bare Express handler that returns the same JSON with
// no auth, in the same run, over loopback. Prints req/s, p50 and p99 latency of each and the ratios, then
// checks that a revocation takes effect on the very next request (no cache).
//
// Each server runs in its own process (this file with BENCH_ROLE=svc|bare) so the load generator does
// not share an event loop with what it measures. svc uses PostgreSQL when DATABASE_URL or
// TEST_DATABASE_URL is set (a fresh database, dropped afterwards), else the embedded PGlite: it needs no
// database variable and no server.
// Beside each throughput figure, CPU per request from /proc (bench/proc-cpu.ts): svc's process, bare
// Express's, and the PostgreSQL backends serving svc's connections, which share the machine's cores with
// both servers and the load generator. BENCH_CPU_PROF=<file> writes svc's V8 CPU profile of the
// measured verify phase (bench/cpu-profile.ts).
// Knobs: BENCH_SECONDS (default 10), BENCH_WARMUP (2), BENCH_CONNECTIONS (32), BENCH_SEQUENTIAL (2000);
// --smoke: short phases, no warm-up (bench/knobs.ts).
import { fileURLToPath } from 'node:url';
import { announce, startChild, stopChild } from './children.js';
import { knob, namedDatabaseUrl } from './knobs.js';
import { backendsSpentUs, ownBackendsCpuUs, processCpuUs } from './proc-cpu.js';

const role = process.env.BENCH_ROLE;
const here = fileURLToPath(import.meta.url);

if (role === 'svc') {
  // test/helpers/server.ts reads TEST_DATABASE_URL; set it only when a URL was named (bench/knobs.ts).
  const named = namedDatabaseUrl();
  if (named) process.env.TEST_DATABASE_URL = named;
  else delete process.env.TEST_DATABASE_URL;
  const { startTestServer } = await import('../test/helpers/server.js');
  const { createUser, createApiToken } = await import('../test/helpers/fixtures.js');
  const server = await startTestServer();
  const user = await createUser(server);
  const { secret } = await createApiToken(server, user, user.orgKey, 'bench');
  const res = await fetch(`${server.url}/v1/auth/verify`, { headers: { authorization: `Bearer ${secret}` } });
  announce({
    url: server.url,
    token: secret,
    session: user.session,
    storage: server.database.kind,
    body: await res.json(),
  });
  // The profile covers the measured verify phase only: the parent's first SIGUSR2 starts it, the second
  // writes it (SIGTERM too, if it is still running).
  const { startCpuProfile } = await import('./cpu-profile.js');
  let stopProfile: (() => Promise<void>) | undefined;
  let profiled = false;
  process.on('SIGUSR2', () => {
    if (!profiled) {
      profiled = true;
      void startCpuProfile().then((stop) => (stopProfile = stop));
    } else void stopProfile?.().then(() => (stopProfile = undefined));
  });
  process.on(
    'SIGTERM',
    () =>
      void (stopProfile?.() ?? Promise.resolve()).finally(
        () => void server.close().finally(() => process.exit(0)),
      ),
  );
} else if (role === 'bare') {
  const { default: express } = await import('express');
  const body: unknown = JSON.parse(process.env.BENCH_BODY!);
  const app = express();
  app.disable('x-powered-by');
  app.get('/v1/auth/verify', (_req, res) => {
    res.json(body);
  });
  const listener = app.listen(0, '127.0.0.1', () => {
    const { port } = listener.address() as { port: number };
    announce({ url: `http://127.0.0.1:${port}` });
  });
  process.on('SIGTERM', () => listener.close(() => process.exit(0)));
} else {
  await main();
}

interface Figures {
  name: string;
  rps: number;
  /** The server process's CPU per request, µs. */
  cpu: number;
  /** The PostgreSQL backends' CPU per request, µs (svc only). */
  pgCpu?: number;
  p50: number;
  p99: number;
  errors: number;
}

async function load(
  name: string,
  url: string,
  headers: Record<string, string>,
  seconds: number,
  connections: number,
  path: string,
  pid: number | undefined,
  backends?: () => Promise<Map<number, number>>,
): Promise<Figures> {
  const { default: autocannon } = await import('autocannon');
  const cpuBefore = processCpuUs(pid!);
  const pgBefore = await backends?.();
  const result = await autocannon({
    url: `${url}${path}`,
    headers: { 'accept-encoding': 'identity', ...headers },
    connections,
    duration: seconds,
  });
  const cpuUs = processCpuUs(pid!) - cpuBefore;
  const pgUs = pgBefore && backendsSpentUs(pgBefore, await backends!());
  const requests = Math.max(1, result.requests.total);
  return {
    name,
    rps: result.requests.average,
    cpu: cpuUs / requests,
    ...(pgUs === undefined ? {} : { pgCpu: pgUs / requests }),
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts + result.non2xx,
  };
}

/**
 * Sequential latency over one keep-alive connection, in microseconds: what one request costs without
 * queueing (autocannon's figures under saturation are mostly queueing, at 1 ms resolution).
 */
async function sequential(url: string, path: string, headers: Record<string, string>, count: number) {
  const { Pool } = await import('undici');
  const pool = new Pool(url, { connections: 1 });
  const samples: number[] = [];
  const warm = Math.min(200, count);
  try {
    for (let i = 0; i < count + warm; i++) {
      const started = process.hrtime.bigint();
      const res = await pool.request({
        method: 'GET',
        path,
        headers: { 'accept-encoding': 'identity', ...headers },
      });
      await res.body.text();
      if (res.statusCode !== 200) throw new Error(`${path} answered ${res.statusCode}`);
      if (i >= warm) samples.push(Number(process.hrtime.bigint() - started) / 1000);
    }
  } finally {
    await pool.close();
  }
  samples.sort((x, y) => x - y);
  const at = (q: number) => samples[Math.min(samples.length - 1, Math.floor(q * samples.length))]!;
  return { p50: at(0.5), p99: at(0.99) };
}

async function main() {
  const seconds = knob('BENCH_SECONDS', 10, 1);
  const warmup = knob('BENCH_WARMUP', 2, 0);
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 32);
  const svc = await startChild<{
    url: string;
    token: string;
    session: string;
    storage: string;
    body: unknown;
  }>(['--import', 'tsx', here], {
    BENCH_ROLE: 'svc',
  });
  let monitor: import('pg').Client | undefined;
  let bare: Awaited<ReturnType<typeof startChild<{ url: string }>>> | undefined;
  try {
    bare = await startChild(['--import', 'tsx', here], {
      BENCH_ROLE: 'bare',
      BENCH_BODY: JSON.stringify(svc.info.body),
    });
    const auth = { authorization: `Bearer ${svc.info.token}` };
    const V = '/v1/auth/verify';
    // svc's PostgreSQL backends, found by its connections' ports (none on the embedded PGlite).
    const databaseUrl = namedDatabaseUrl();
    if (databaseUrl) {
      const { default: pg } = await import('pg');
      monitor = new pg.Client({ connectionString: databaseUrl });
      await monitor.connect();
    }
    const postgresPort = Number(databaseUrl ? new URL(databaseUrl).port || 5432 : 0);
    const backends = monitor && (() => ownBackendsCpuUs(monitor!, svc.child.pid, postgresPort));
    // Warm-up (JIT, connection pool), then the measured runs back to back.
    if (warmup) {
      await load('warm-up', svc.info.url, auth, warmup, connections, V, svc.child.pid);
      await load('warm-up', bare.info.url, {}, warmup, connections, V, bare.child.pid);
    }
    if (process.env.BENCH_CPU_PROF) svc.child.kill('SIGUSR2');
    const a = await load(
      'svc /v1/auth/verify',
      svc.info.url,
      auth,
      seconds,
      connections,
      V,
      svc.child.pid,
      backends,
    );
    const b = await load(
      'bare express, same JSON',
      bare.info.url,
      {},
      seconds,
      connections,
      V,
      bare.child.pid,
    );
    // The same svc app without auth or database: separates the app's middleware stack from the auth check.
    const c = await load(
      'svc /healthz (no auth)',
      svc.info.url,
      {},
      seconds,
      connections,
      '/healthz',
      svc.child.pid,
      backends,
    );

    const cpu = (f: Figures) =>
      `CPU/req ${f.cpu.toFixed(0).padStart(4)} µs` +
      (f.pgCpu === undefined ? '' : ` + PostgreSQL ${f.pgCpu.toFixed(0).padStart(4)} µs`);
    const row = (f: Figures) =>
      `${f.name.padEnd(26)} ${f.rps.toFixed(0).padStart(8)} req/s   p50 ${String(f.p50).padStart(4)} ms   p99 ${String(f.p99).padStart(4)} ms   errors ${f.errors}   ${cpu(f)}`;
    process.stdout.write(
      [
        `verify benchmark: ${seconds}s × ${connections} connections over loopback; svc storage: ${svc.info.storage}`,
        row(a),
        row(b),
        row(c),
        `ratio svc/bare: throughput ${(a.rps / b.rps).toFixed(2)}×, p50 ${(a.p50 / Math.max(b.p50, 1)).toFixed(2)}×, p99 ${(a.p99 / Math.max(b.p99, 1)).toFixed(2)}×`,
        `CPU per request svc/bare: ${(a.cpu / b.cpu).toFixed(2)}× svc alone, ${((a.cpu + (a.pgCpu ?? 0)) / b.cpu).toFixed(2)}× with PostgreSQL`,
        `time per request at saturation (1/throughput): verify ${(1000 / a.rps).toFixed(3)} ms, bare ${(1000 / b.rps).toFixed(3)} ms, svc /healthz ${(1000 / c.rps).toFixed(3)} ms → auth check ≈ ${(1000 / a.rps - 1000 / c.rps).toFixed(3)} ms`,
      ].join('\n') + '\n',
    );

    const n = knob('BENCH_SEQUENTIAL', 2000, 50);
    const sv = await sequential(svc.info.url, '/v1/auth/verify', auth, n);
    const sh = await sequential(svc.info.url, '/healthz', {}, n);
    const sb = await sequential(bare.info.url, '/v1/auth/verify', {}, n);
    const us = (x: number) => `${x.toFixed(0).padStart(6)} µs`;
    process.stdout.write(
      [
        `sequential, one keep-alive connection, ${n} requests each (after ${Math.min(200, n)} warm-up):`,
        `  svc /v1/auth/verify      p50 ${us(sv.p50)}   p99 ${us(sv.p99)}`,
        `  svc /healthz (no auth)   p50 ${us(sh.p50)}   p99 ${us(sh.p99)}`,
        `  bare express             p50 ${us(sb.p50)}   p99 ${us(sb.p99)}`,
        `  auth check (verify − healthz, same app) p50 ≈ ${us(sv.p50 - sh.p50)}; verify/bare p50 ratio ${(sv.p50 / sb.p50).toFixed(2)}×`,
      ].join('\n') + '\n',
    );

    // Revocation is seen on the very next request: revoke through the API, then verify once.
    const listed = await fetch(`${svc.info.url}/v1/tokens`, {
      headers: { authorization: `Bearer ${svc.info.session}` },
    }).then((r) => r.json());
    const id = (listed as { data: { id: number }[] }).data[0]!.id;
    await fetch(`${svc.info.url}/v1/tokens/revoke`, {
      method: 'POST',
      headers: { authorization: `Bearer ${svc.info.session}`, 'content-type': 'application/json' },
      body: JSON.stringify({ id }),
    });
    const after = await fetch(`${svc.info.url}/v1/auth/verify`, { headers: auth });
    process.stdout.write(`after revocation, the next verify answers ${after.status} (expected 401)\n`);
    if (after.status !== 401) process.exitCode = 1;
  } finally {
    await monitor?.end();
    if (bare) await stopChild(bare.child);
    await stopChild(svc.child);
  }
}
