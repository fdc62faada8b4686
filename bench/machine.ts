import { readdirSync, readFileSync } from 'node:fs';
import { procStat } from './proc-cpu.js';

// How much of the machine a bench had. On a virtual machine the hypervisor may hand this guest's CPUs
// to others ("steal", the 8th field of /proc/stat's `cpu` line, proc(5)); every figure of a run taken
// under heavy steal is slower across the board, the peers' included. Seen here: 60 % steal in one
// minute and 4 % the next. Benches print the share beside their figures so that a reader can tell.
//
// The guest's own kernel threads take CPU too, and some in bursts: on this machine kind a memory monitor
// (`kdamond.0`, the kernel's DAMON, sampling physical memory for the host) ran every 0.54 s for 6–25 ms of a
// core, and at a paced 200 calls/s svc's slow calls came in runs at exactly those instants. So the report
// also gives the kernel threads' share and the busiest of them.

interface CpuTimes {
  steal: number;
  total: number;
  /** CPU ticks of each kernel thread (a child of kthreadd, pid 2) so far, and its name, by pid. */
  kernel: Map<string, { name: string; ticks: number }>;
}

/** Each kernel thread's CPU ticks so far (utime + stime, proc(5)); empty where /proc cannot be read. */
function kernelThreadTicks(): CpuTimes['kernel'] {
  const ticks: CpuTimes['kernel'] = new Map();
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return ticks;
  }
  for (const pid of pids) {
    const stat = procStat(pid);
    // Kernel threads are kthreadd's (pid 2) children. By pid: a worker's name changes with the work it
    // does (kworker/u8:0-writeback, -events…).
    if (stat?.ppid === 2) ticks.set(pid, { name: stat.name, ticks: stat.ticks });
  }
  return ticks;
}

/** The machine's CPU time so far, in clock ticks (Linux); null where /proc/stat cannot be read. */
export function cpuTimes(): CpuTimes | null {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
    const ticks = line.trim().split(/\s+/).slice(1, 9).map(Number);
    if (ticks.length < 8 || ticks.some((t) => !Number.isFinite(t))) return null;
    return { steal: ticks[7]!, total: ticks.reduce((a, b) => a + b, 0), kernel: kernelThreadTicks() };
  } catch {
    return null;
  }
}

/**
 * Lines on the CPU time stolen from this machine between two readings and on what its kernel threads
 * took (the busiest named), or '' when unknown.
 */
export function stealReport(before: CpuTimes | null, after: CpuTimes | null = cpuTimes()): string {
  if (!before || !after || after.total <= before.total) return '';
  const all = after.total - before.total;
  const share = (100 * (after.steal - before.steal)) / all;
  const spent = [...after.kernel]
    .map(([pid, { name, ticks }]) => [name, ticks - (before.kernel.get(pid)?.ticks ?? 0)] as const)
    .filter(([, ticks]) => ticks > 0)
    .sort((a, b) => b[1] - a[1]);
  const kernel = spent.reduce((sum, [, ticks]) => sum + ticks, 0);
  const busiest = spent
    .slice(0, 2)
    .map(([name, ticks]) => `${name} ${((100 * ticks) / all).toFixed(1)}%`)
    .join(', ');
  return (
    `machine: ${share.toFixed(1)}% of CPU time stolen by the hypervisor during the run${share >= 10 ? " (heavy: every figure of this run is slowed, the peers' too)" : ''}\n` +
    `machine: ${((100 * kernel) / all).toFixed(1)}% of CPU time in kernel threads${busiest ? ` (${busiest})` : ''}\n`
  );
}
