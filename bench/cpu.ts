// `npm run bench -- cpu`: where a chat call's CPU goes. Starts the proxy bench's fake provider and svc
// (bench/proxy.ts roles, svc on PostgreSQL), loads POST /v1/chat/completions with 32 connections, and
// reports, per call: CPU milliseconds of the svc process, the fake, PostgreSQL (all its processes) and
// the load generator (from /proc), and PostgreSQL transactions (pg_stat_database). A tool for finding
// what to cut, not a comparison with a peer: `npm run bench -- proxy` is that.
//
// Environment: TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test), BENCH_SECONDS
// (default 10), BENCH_ORGS=16 to spread the load over 16 organizations, BENCH_STREAM=1 for streamed
// calls (read whole) instead of JSON ones, BENCH_KEY_LIMITED=1 to call with the key that has an RPM and a
// TPM limit (the largest, never reached: every call counted in both rolling windows), BENCH_PROFILE=1 to write a
// V8 CPU profile of svc into ./bench-profiles (open it in Chrome DevTools).
import { execSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Result } from 'autocannon';
import { startChild, stopChild, type ProxySvcInfo } from './children.js';
import { postgresProcessesCpuUs, processCpuUs } from './proc-cpu.js';

const databaseUrl = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const seconds = Number(process.env.BENCH_SECONDS ?? 10);
const proxyBench = fileURLToPath(new URL('./proxy.ts', import.meta.url));

/** User + system CPU seconds of one process. */
function cpuSeconds(pid: number): number {
  return processCpuUs(pid) / 1e6;
}

/** CPU seconds so far of all PostgreSQL's processes (one that ended meanwhile is lost). */
function postgresCpu(): number {
  let us = 0;
  for (const spent of postgresProcessesCpuUs().values()) us += spent;
  return us / 1e6;
}

const transactions = () =>
  Number(
    execSync(
      `psql "${databaseUrl}" -Atc "select sum(xact_commit + xact_rollback) from pg_stat_database"`,
    ).toString(),
  );

const fake = await startChild(['--import', 'tsx', proxyBench], { BENCH_ROLE: 'fake' });
const profile = process.env.BENCH_PROFILE ? ['--cpu-prof', '--cpu-prof-dir=bench-profiles'] : [];
const svc = await startChild<ProxySvcInfo>([...profile, '--import', 'tsx', proxyBench], {
  BENCH_ROLE: 'svc',
  FAKE_URL: fake.info.url,
  TEST_DATABASE_URL: databaseUrl,
});
try {
  const { default: autocannon } = await import('autocannon');
  const tokens: string[] = process.env.BENCH_ORGS
    ? svc.info.spread
    : [process.env.BENCH_KEY_LIMITED === '1' ? svc.info.limited : svc.info.token];
  let n = 0;
  const load = (duration: number) =>
    new Promise<Result>((resolve, reject) =>
      autocannon(
        {
          url: `${svc.info.url}/v1/chat/completions`,
          method: 'POST',
          connections: 32,
          duration,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'x',
            stream: process.env.BENCH_STREAM === '1',
            max_tokens: 64,
            messages: [{ role: 'user', content: 'Tell me about foxes.' }],
          }),
          requests: [
            {
              setupRequest: (r: { headers: Record<string, string> }) => ({
                ...r,
                headers: { ...r.headers, authorization: `Bearer ${tokens[n++ % tokens.length]}` },
              }),
            },
          ],
        } as never,
        (err: Error | null, result: Result) => (err ? reject(err) : resolve(result)),
      ),
    );
  await load(2); // warm-up
  const processes = { svc: svc.child.pid!, fake: fake.child.pid!, 'load generator': process.pid };
  const before = {
    ...Object.fromEntries(Object.entries(processes).map(([k, pid]) => [k, cpuSeconds(pid)])),
    postgres: postgresCpu(),
  };
  const x0 = transactions();
  const result = await load(seconds);
  const x1 = transactions();
  const after = {
    ...Object.fromEntries(Object.entries(processes).map(([k, pid]) => [k, cpuSeconds(pid)])),
    postgres: postgresCpu(),
  };
  const calls = result.requests.total;
  const out = (s: string) => process.stdout.write(`${s}\n`);
  out(
    `bench cpu: ${Math.round(result.requests.average)} chat calls/s over ${seconds}s, ${tokens.length} org(s), non-2xx ${result.non2xx}, errors ${result.errors}`,
  );
  for (const k of Object.keys(before) as (keyof typeof before)[]) {
    const used = after[k] - before[k];
    out(
      `  ${k.padEnd(15)} ${((used / calls) * 1000).toFixed(3)} ms CPU per call   ${((used / seconds) * 100).toFixed(0)}% of a core`,
    );
  }
  out(`  PostgreSQL transactions per call: ${((x1 - x0) / calls).toFixed(2)}`);
} finally {
  await stopChild(svc.child);
  await stopChild(fake.child);
}
