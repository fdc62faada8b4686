// `npm run bench -- memory`: does svc's memory plateau under a long mixed load, and come back when idle?
// svc (bench/proxy.ts's svc child, on PostgreSQL as deployed: bench/knobs.ts benchDatabaseUrl) serves a mixed load against the fake
// provider for BENCH_SECONDS: JSON calls, streams read whole, streams dropped after their first chunk, and
// streams read slowly. svc's memory is sampled every BENCH_SAMPLE_SECONDS: its resident set from /proc
// (as the collector left it), then the V8 heap after a full collection, asked of the child with SIGUSR2. Printed: before the load, at its
// end, after BENCH_IDLE_SECONDS idle; and the growth between the second and the last third of the run,
// which is zero for a plateau.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { ChildProcess } from 'node:child_process';
import { request } from 'undici';
import { startChild, stopChild, type ProxySvcInfo } from './children.js';
import { benchDatabaseUrl, knob } from './knobs.js';

const SECONDS = knob('BENCH_SECONDS', 600, 6);
const IDLE_SECONDS = knob('BENCH_IDLE_SECONDS', 30, 2);
const SAMPLE_SECONDS = knob('BENCH_SAMPLE_SECONDS', 10, 1);
const CONNECTIONS = knob('BENCH_CONNECTIONS', 32, 4);
const proxyBench = fileURLToPath(new URL('./proxy.ts', import.meta.url));

interface Sample {
  at: number;
  rssMb: number;
  heapMb: number;
  externalMb: number;
}

/** Resident set of a process, from /proc (Linux), in MB. */
function rssOf(pid: number): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m);
  return line ? Number(line[1]) / 1024 : NaN;
}

/** One sample: the child collects its garbage and prints its heap (bench/proxy.ts, BENCH_MEMORY=1). */
async function sample(child: ChildProcess, started: number): Promise<Sample> {
  const rssMb = rssOf(child.pid!);
  const heap = await new Promise<{ heapUsed: number; external: number }>((resolve) => {
    let out = '';
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      const m = /BENCH_MEM (.*)\n/.exec(out);
      if (!m) return;
      child.stdout!.off('data', onData);
      resolve(JSON.parse(m[1]!) as { heapUsed: number; external: number });
    };
    child.stdout!.on('data', onData);
    child.kill('SIGUSR2');
  });
  const mb = (n: number) => n / 1024 / 1024;
  return {
    at: (performance.now() - started) / 1000,
    rssMb,
    heapMb: mb(heap.heapUsed),
    externalMb: mb(heap.external),
  };
}

type Kind = 'json' | 'stream' | 'dropped' | 'slow';
const KINDS: Kind[] = ['json', 'json', 'json', 'stream', 'dropped', 'slow'];

/** One call of the given kind; resolves when svc is done with it from the caller's side. */
async function call(url: string, token: string, kind: Kind): Promise<number> {
  const stream = kind !== 'json';
  const controller = new AbortController();
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'bench-model', stream, messages: [{ role: 'user', content: 'hi' }] }),
    signal: controller.signal,
  });
  if (kind === 'dropped') {
    for await (const _chunk of res.body) break; // leaves after the first chunk
    controller.abort();
    return res.statusCode;
  }
  for await (const _chunk of res.body) {
    if (kind === 'slow') await new Promise((r) => setTimeout(r, 20));
  }
  return res.statusCode;
}

const databaseUrl = (await benchDatabaseUrl()) ?? '';
const fake = await startChild([`--import`, 'tsx', proxyBench], { BENCH_ROLE: 'fake' });
const svc = await startChild<ProxySvcInfo>(['--expose-gc', '--import', 'tsx', proxyBench], {
  BENCH_ROLE: 'svc',
  BENCH_MEMORY: '1',
  FAKE_URL: fake.info.url,
  TEST_DATABASE_URL: databaseUrl,
});
try {
  const started = performance.now();
  const samples: Sample[] = [await sample(svc.child, started)];
  const statuses = new Map<number, number>();
  const deadline = started + SECONDS * 1000;
  let n = 0;
  const worker = async () => {
    while (performance.now() < deadline) {
      const status = await call(svc.info.url, svc.info.token, KINDS[n++ % KINDS.length]!).catch(() => 0);
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
    }
  };
  const load = Promise.all(Array.from({ length: CONNECTIONS }, worker));
  const sampler = (async () => {
    while (performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, SAMPLE_SECONDS * 1000));
      samples.push(await sample(svc.child, started));
    }
  })();
  await Promise.all([load, sampler]);
  const atEnd = await sample(svc.child, started);
  await new Promise((r) => setTimeout(r, IDLE_SECONDS * 1000));
  const idle = await sample(svc.child, started);

  const show = (label: string, s: Sample) =>
    `${label.padEnd(22)} rss ${s.rssMb.toFixed(0).padStart(4)} MB   heap after gc ${s.heapMb.toFixed(1).padStart(6)} MB   external ${s.externalMb.toFixed(1).padStart(5)} MB`;
  const third = (k: number) =>
    samples.filter((s) => s.at >= (SECONDS * k) / 3 && s.at < (SECONDS * (k + 1)) / 3);
  const peak = (list: Sample[], key: 'rssMb' | 'heapMb') => Math.max(...list.map((s) => s[key]));
  const [second, last] = [third(1), third(2)];
  process.stdout.write(
    [
      `memory: ${SECONDS} s of mixed calls over ${CONNECTIONS} connections (${[...statuses].map(([s, c]) => `${c} × ${s}`).join(', ')})`,
      show('before', samples[0]!),
      show('end of load', atEnd),
      show(`after ${IDLE_SECONDS} s idle`, idle),
      second.length && last.length
        ? `plateau: peak rss ${peak(second, 'rssMb').toFixed(0)} → ${peak(last, 'rssMb').toFixed(0)} MB, peak heap ${peak(second, 'heapMb').toFixed(1)} → ${peak(last, 'heapMb').toFixed(1)} MB (second third → last third)`
        : 'plateau: too few samples to compare thirds',
      '',
    ].join('\n'),
  );
  if ((statuses.get(0) ?? 0) > 0 && !process.env.BENCH_SMOKE) process.exitCode = 1;
} finally {
  await stopChild(svc.child);
  await stopChild(fake.child);
}
