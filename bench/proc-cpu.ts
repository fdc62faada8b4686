import { execSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import pg from 'pg';

// CPU time of processes on this machine, from /proc (proc(5)): a bench's wall-clock figures move with
// whatever else the machine does, CPU per operation much less. PostgreSQL runs here too, so its
// backends' CPU is readable the same way.

/** /proc reports clock ticks; USER_HZ is 100 on Linux. */
const TICK_US = 1_000_000 / 100;

/**
 * One process's /proc/<pid>/stat: its name, its parent's pid and its user + system CPU so far in clock
 * ticks; null for a process that has ended. The name may hold spaces and parentheses: the fields after it
 * are read from its last ')'.
 */
export function procStat(pid: number | string): { name: string; ppid: number; ticks: number } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const close = stat.lastIndexOf(')');
    const fields = stat.slice(close + 2).split(' '); // fields[0] is the 3rd field: the state
    return {
      name: stat.slice(stat.indexOf('(') + 1, close),
      ppid: Number(fields[1]),
      ticks: Number(fields[11]) + Number(fields[12]),
    };
  } catch {
    return null;
  }
}

/** User + system CPU of one process so far, µs; 0 for a process that has ended. */
export function processCpuUs(pid: number): number {
  return (procStat(pid)?.ticks ?? 0) * TICK_US;
}

/** The CPU so far of each PostgreSQL backend connected to `databaseUrl`'s database (pid → µs). */
export async function backendsCpuUs(databaseUrl: string): Promise<Map<number, number>> {
  const client = new pg.Client({ connectionString: databaseUrl });
  client.on('error', () => {});
  await client.connect();
  try {
    const { rows } = await client.query<{ pid: number }>(
      'select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()',
    );
    return new Map(rows.map((r) => [r.pid, processCpuUs(r.pid)]));
  } finally {
    await client.end();
  }
}

/** The CPU so far of every PostgreSQL process on this machine (pid → µs): backends, WAL writer and all. */
export function postgresProcessesCpuUs(): Map<number, number> {
  const pids = execSync('pgrep -x postgres || true').toString().trim().split('\n').filter(Boolean);
  return new Map(pids.map((pid) => [Number(pid), processCpuUs(Number(pid))]));
}

/**
 * CPU the backends spent between two readings, µs: a backend that started meanwhile counts from zero;
 * one that ended meanwhile is lost (services keep their pools, so over a measured stretch the same
 * backends serve them).
 */
export function backendsSpentUs(before: Map<number, number>, after: Map<number, number>): number {
  let spent = 0;
  for (const [pid, us] of after) spent += us - (before.get(pid) ?? 0);
  return spent;
}

/**
 * The CPU so far (pid → µs) of the PostgreSQL backends serving the connections of process `pid` to port
 * `postgresPort`, found through `monitor` (a connection of the bench's own): what one process's calls cost
 * PostgreSQL, whatever else the server runs meanwhile.
 */
export async function ownBackendsCpuUs(
  monitor: pg.Client,
  pid: number | undefined,
  postgresPort: number,
): Promise<Map<number, number>> {
  const ports = pid ? connectedPorts(pid, postgresPort) : [];
  if (!ports.length) return new Map();
  const { rows } = await monitor.query<{ pid: number }>(
    'select pid from pg_stat_activity where client_port = any($1::int[])',
    [ports],
  );
  return new Map(rows.map((r) => [r.pid, processCpuUs(r.pid)]));
}

/** The local ports of `pid`'s TCP connections to port `remotePort` (proc(5): /proc/<pid>/fd, net/tcp). */
export function connectedPorts(pid: number, remotePort: number): number[] {
  const inodes = new Set<string>();
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return []; // the process has ended
  }
  for (const fd of fds) {
    try {
      const socket = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (socket) inodes.add(socket[1]!);
    } catch {
      // closed meanwhile
    }
  }
  const ports: number[] = [];
  for (const table of ['tcp', 'tcp6']) {
    let lines: string[];
    try {
      lines = readFileSync(`/proc/${pid}/net/${table}`, 'utf8').split('\n').slice(1);
    } catch {
      continue;
    }
    for (const line of lines) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
      const f = line.trim().split(/\s+/);
      if (f.length < 10 || !inodes.has(f[9]!)) continue;
      if (parseInt(f[2]!.split(':')[1]!, 16) === remotePort) ports.push(parseInt(f[1]!.split(':')[1]!, 16));
    }
  }
  return ports;
}
