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

/** A process's voluntary context switches so far: each is a wait with nothing to run (an empty event loop). */
export function wakeups(pid: number): number {
  try {
    return Number(
      /voluntary_ctxt_switches:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0,
    );
  } catch {
    return 0;
  }
}

/** The kernel's share of a process's CPU so far, µs (stime; on loopback it includes delivering what it sends). */
export function systemCpuUs(pid: number): number {
  try {
    return Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[12]) * TICK_US;
  } catch {
    return 0;
  }
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
  /** svc's PostgreSQL backends at the phase's end (every worker's pool and own connections). */
  backends: number;
  /** Transactions committed in svc's database during the phase (pg_stat_database; batches commit once). */
  commits: number;
  /** svc's processes' waits for work (voluntary context switches) and kernel CPU, µs, in the phase. */
  svcWakeups: number;
  svcSystemUs: number;
  /** What svc's busy backends were doing, sampled every few ms: "Lock:transactionid" → share of samples. */
  waits: Map<string, number>;
}

interface Reading {
  at: number;
  svc: number[];
  backends: Map<number, number>;
  fake: number;
  generator: number;
  machine: number;
  commits: number;
  wakeups: number;
  system: number;
}

/** Starts a phase's CPU accounting; the returned function ends it and gives the phase's figures. */
export async function startPhaseCpu(
  monitor: pg.Client,
  svcPids: number[],
  fakePid: number,
  postgresPort: number,
  database: string,
): Promise<() => Promise<PhaseCpu>> {
  const read = async (): Promise<Reading> => {
    const backends = new Map<number, number>();
    for (const pid of svcPids)
      for (const [b, us] of await ownBackendsCpuUs(monitor, pid, postgresPort)) backends.set(b, us);
    const self = process.cpuUsage();
    // Statistics are read from a snapshot taken once per transaction: a fresh one each time.
    await monitor.query('select pg_stat_clear_snapshot()');
    const { rows } = await monitor.query<{ n: string }>(
      'select xact_commit as n from pg_stat_database where datname = $1',
      [database],
    );
    return {
      commits: Number(rows[0]?.n ?? 0),
      wakeups: svcPids.reduce((a, pid) => a + wakeups(pid), 0),
      system: svcPids.reduce((a, pid) => a + systemCpuUs(pid), 0),
      at: performance.now(),
      svc: svcPids.map(processCpuUs),
      backends,
      fake: processCpuUs(fakePid),
      generator: self.user + self.system,
      machine: machineBusyUs(),
    };
  };
  const before = await read();
  // What PostgreSQL's backends for svc's database wait on while busy (pg_stat_activity), sampled.
  const waits = new Map<string, number>();
  let samples = 0;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const { rows } = await monitor.query<{ w: string }>(
        `select coalesce(wait_event_type || ':' || wait_event, 'running') as w from pg_stat_activity
          where datname = $1 and state = 'active' and pid <> pg_backend_pid()`,
        [database],
      );
      samples++;
      for (const { w } of rows) waits.set(w, (waits.get(w) ?? 0) + 1);
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  return async () => {
    sampling = false;
    await sampler;
    for (const [w, n] of waits) waits.set(w, n / Math.max(1, samples));
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
      backends: after.backends.size,
      commits: after.commits - before.commits,
      svcWakeups: after.wakeups - before.wakeups,
      svcSystemUs: after.system - before.system,
      waits,
    };
  };
}
