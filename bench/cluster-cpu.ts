import { readFileSync } from 'node:fs';
import type pg from 'pg';
import { backendsSpentUs, ownBackendsCpuUs, processCpuUs } from './proc-cpu.js';

// Where the machine's CPU went during one load phase of the cluster bench (bench/cluster.ts), read from
// /proc (proc(5)): svc's processes (the primary and each worker, or the one process), the PostgreSQL
// backends serving their connections, the fake provider, the load generator (the bench's own process,
// where autocannon runs), and the rest of the machine (every other process, other work included).

const TICK_US = 1_000_000 / 100; // USER_HZ

/** Busy CPU of the whole machine so far, µs: every core's time not idle and not waiting for I/O. */
export function machineBusyUs(): number {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = f.slice(0, 8).reduce((a, b) => a + b, 0); // user nice system idle iowait irq softirq steal
  return (total - f[3]! - f[4]!) * TICK_US;
}

/** The pids of `pid`'s children (node:cluster's workers of a primary); none for a single process. */
export function childPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
  } catch {
    return [];
  }
}

export interface PhaseCpu {
  wallUs: number;
  /** Each svc process (the primary first when there are workers), µs. */
  svcUs: number[];
  /** The PostgreSQL backends of svc's connections, µs. */
  postgresUs: number;
  fakeUs: number;
  generatorUs: number;
  /** The machine's busy CPU not counted above (other work, PostgreSQL's own background processes), µs. */
  otherUs: number;
}

interface Reading {
  at: number;
  svc: number[];
  backends: Map<number, number>;
  fake: number;
  generator: number;
  machine: number;
}

/** Starts a phase's CPU accounting; the returned function ends it and gives the phase's figures. */
export async function startPhaseCpu(
  monitor: pg.Client,
  svcPids: number[],
  fakePid: number,
  postgresPort: number,
): Promise<() => Promise<PhaseCpu>> {
  const read = async (): Promise<Reading> => {
    const backends = new Map<number, number>();
    for (const pid of svcPids)
      for (const [b, us] of await ownBackendsCpuUs(monitor, pid, postgresPort)) backends.set(b, us);
    const self = process.cpuUsage();
    return {
      at: performance.now(),
      svc: svcPids.map(processCpuUs),
      backends,
      fake: processCpuUs(fakePid),
      generator: self.user + self.system,
      machine: machineBusyUs(),
    };
  };
  const before = await read();
  return async () => {
    const after = await read();
    const svcUs = after.svc.map((us, i) => us - before.svc[i]!);
    const postgresUs = backendsSpentUs(before.backends, after.backends);
    const fakeUs = after.fake - before.fake;
    const generatorUs = after.generator - before.generator;
    const counted = svcUs.reduce((a, b) => a + b, 0) + postgresUs + fakeUs + generatorUs;
    return {
      wallUs: (after.at - before.at) * 1000,
      svcUs,
      postgresUs,
      fakeUs,
      generatorUs,
      otherUs: Math.max(0, after.machine - before.machine - counted),
    };
  };
}
