// BENCH_CPU_PROF=<file>: a V8 CPU profile of the process that calls this (the proxy bench's svc child:
// bench/proxy.ts, so also each side of `npm run bench -- ab` through BENCH_AB_A_ENV / BENCH_AB_B_ENV),
// written to <file> when it stops. Node refuses `--cpu-prof` in NODE_OPTIONS, and the bench's children
// take their flags from the bench, so the profiler is started from inside through node:inspector. Open
// the file in Chrome's DevTools (Performance) or any .cpuprofile viewer. Sampled every 100 µs, so the
// profiled side runs slower than its peer: read shares, not times.
import { writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';

/** Starts profiling when BENCH_CPU_PROF names a file; the returned function stops and writes it. */
export async function startCpuProfile(): Promise<() => Promise<void>> {
  const file = process.env.BENCH_CPU_PROF;
  if (!file) return async () => {};
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 100 });
  await session.post('Profiler.start');
  return async () => {
    const { profile } = await session.post('Profiler.stop');
    await writeFile(file, JSON.stringify(profile));
    session.disconnect();
  };
}
