import { readFileSync } from 'node:fs';

// How much of the machine a bench had. On a virtual machine the hypervisor may hand this guest's CPUs
// to others ("steal", the 8th field of /proc/stat's `cpu` line, proc(5)); every figure of a run taken
// under heavy steal is slower across the board, the peers' included. Seen here: 60 % steal in one
// minute and 4 % the next. Benches print the share beside their figures so that a reader can tell.

interface CpuTimes {
  steal: number;
  total: number;
}

/** The machine's CPU time so far, in clock ticks (Linux); null where /proc/stat cannot be read. */
export function cpuTimes(): CpuTimes | null {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
    const ticks = line.trim().split(/\s+/).slice(1, 9).map(Number);
    if (ticks.length < 8 || ticks.some((t) => !Number.isFinite(t))) return null;
    return { steal: ticks[7]!, total: ticks.reduce((a, b) => a + b, 0) };
  } catch {
    return null;
  }
}

/** One line on the CPU time stolen from this machine between two readings, or '' when unknown. */
export function stealReport(before: CpuTimes | null, after: CpuTimes | null = cpuTimes()): string {
  if (!before || !after || after.total <= before.total) return '';
  const share = (100 * (after.steal - before.steal)) / (after.total - before.total);
  return `machine: ${share.toFixed(1)}% of CPU time stolen by the hypervisor during the run${share >= 10 ? " (heavy: every figure of this run is slowed, the peers' too)" : ''}\n`;
}
