import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';

// What the machine does to a process that does nothing: a Node.js child whose only work is a 1 ms timer,
// run beside a paced phase. Each time its timer fires late by STALL_MS or more, the process was kept
// from running (both cores busy with the load generator, the provider, the proxy and PostgreSQL's
// processes) or its own event loop was held; it records when and for how long. A paced call of a few
// milliseconds that overlaps such a stall takes it on, whichever proxy serves it, so a target's p99 at
// 200/s is read beside the share of its blocks' time that an idle process spent stalled.

/** A timer this late or later counts as a stall. */
export const STALL_MS = 5;

/** One stall: when it began (ms on the parent's clock, performance.now()) and how long it was. */
export interface Stall {
  at: number;
  ms: number;
}

export interface IdleProbe {
  /** Stops the child and returns its stalls. */
  stop(): Promise<Stall[]>;
}

// The child keeps absolute times (performance.timeOrigin + now), which the parent maps onto its clock.
const CHILD = `
const { performance } = require('node:perf_hooks');
const stalls = [];
let last = performance.now();
setInterval(() => {
  const now = performance.now();
  const late = now - last - 1;
  if (late >= ${STALL_MS}) stalls.push([performance.timeOrigin + last + 1, late]);
  last = now;
}, 1);
process.stdout.write('ready\\n');
// The parent's end closes this pipe: a bench that dies leaves no probe behind.
process.stdin.resume();
process.stdin.on('end', () => process.exit(0));
process.on('SIGTERM', () => process.stdout.write(JSON.stringify(stalls) + '\\n', () => process.exit(0)));
`;

/** Starts the idle child; resolves once its timer runs. */
export function startIdleProbe(): Promise<IdleProbe> {
  const child = spawn(process.execPath, ['-e', CHILD], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.stdout.once('data', () =>
      resolve({
        async stop() {
          child.kill('SIGTERM');
          await exited;
          const last = out.trim().split('\n').at(-1) ?? '';
          if (!last.startsWith('[')) throw new Error('the idle probe ended without reporting its stalls');
          const rows = JSON.parse(last) as [number, number][];
          return rows.map(([at, ms]) => ({ at: at - performance.timeOrigin, ms }));
        },
      }),
    );
  });
}

/** The share of `windows`' time (each [from, to] on this process's clock) that `stalls` covered. */
export function stalledShare(
  stalls: Stall[],
  windows: [number, number][],
): { share: number; longest: number } {
  let total = 0;
  let stalled = 0;
  let longest = 0;
  for (const [from, to] of windows) {
    total += to - from;
    for (const s of stalls) {
      const overlap = Math.min(to, s.at + s.ms) - Math.max(from, s.at);
      if (overlap <= 0) continue;
      stalled += overlap;
      longest = Math.max(longest, s.ms);
    }
  }
  return { share: total ? stalled / total : 0, longest };
}
