import { performance } from 'node:perf_hooks';
import { stalledShare, startIdleProbe, type Stall } from './idle-probe.js';

// The proxy bench's chat JSON row (chat JSON at a paced 200 req/s, time added over the
// provider): non-streamed calls sent open-loop at a fixed rate — one call every 1000/rate ms, whether or
// not the previous ones answered, as real traffic arrives — each timed alone on a monotonic clock, to
// the last byte of its body. Targets take turns in blocks (the first few calls of each block unrecorded),
// as the first-byte phase does, so a drift of the machine falls on every target alike; a target's added
// time is its percentile minus the provider's own (`direct`) at the same percentile.

export interface PacedTarget {
  name: string;
  /** One call, resolved when its whole body was read; rejects on a non-200 (with `callFailed`). */
  call(): Promise<void>;
}

export interface PacedFigures {
  p50: number;
  p99: number;
  errors: number;
  /** The first FAILURES_KEPT failures, each as `failureText` wrote it. */
  failures: string[];
  /**
   * While this target's blocks ran: the share of their time an idle process beside them was stalled,
   * and its longest stall in ms (bench/idle-probe.ts).
   */
  idleStalled: { share: number; longest: number };
}

/** How many failures a block or a run keeps, so that a failed run can be diagnosed from its output. */
export const FAILURES_KEPT = 3;
const BODY_SHOWN = 200;

/** The error a call rejects with on a non-200: its status and the first 200 bytes of its body. */
export const callFailed = (name: string, status: number, body: string | Buffer) =>
  new Error(
    `${name}: status ${status}, body ${JSON.stringify(Buffer.from(body).subarray(0, BODY_SHOWN).toString())}`,
  );

/** A failure as printed: the call's error message (a status and body, or a connection's error). */
const failureText = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** `name`'s failures on stderr: the count and the first few. */
export function reportFailures(name: string, errors: number, failures: string[]): void {
  if (!errors) return;
  process.stderr.write(`${name}: ${errors} calls failed; the first ${failures.length}:\n`);
  for (const f of failures) process.stderr.write(`  ${f}\n`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * One block at `rate` calls/s: the latencies of its calls after the first `warm`, its errors and the
 * first few, and when its recorded calls were in flight (`window`, on performance.now()'s clock).
 */
export async function pacedBlock(t: PacedTarget, rate: number, calls: number, warm: number) {
  const gap = 1000 / rate;
  const start = performance.now();
  let recordedFrom = start;
  const times: number[] = [];
  let errors = 0;
  const failures: string[] = [];
  const pending: Promise<void>[] = [];
  for (let i = 0; i < warm + calls; i++) {
    const due = start + i * gap;
    const wait = due - performance.now();
    if (wait > 0.5) await sleep(wait);
    const sent = performance.now();
    if (i === warm) recordedFrom = sent;
    pending.push(
      t.call().then(
        () => {
          if (i >= warm) times.push(performance.now() - sent);
        },
        (err: unknown) => {
          errors++;
          if (failures.length < FAILURES_KEPT) failures.push(failureText(err));
        },
      ),
    );
  }
  await Promise.all(pending);
  return { times, errors, failures, window: [recordedFrom, performance.now()] as [number, number] };
}

/** The `q` quantile of ascending `sorted` (NaN when empty). */
export const percentile = (sorted: number[], q: number) =>
  sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))]! : NaN;

/**
 * Every target's p50 / p99 latency at `rate` calls/s over `samples` recorded calls, in turns of `per`.
 * A target's failed calls are counted, and the first few printed on stderr. An idle process runs beside
 * the blocks, and each target's figures say how much of its blocks' time that process was stalled.
 */
export async function pacedJson(
  targets: PacedTarget[],
  o: { rate: number; samples: number; per: number; warm: number },
): Promise<Map<string, PacedFigures>> {
  const per = Math.min(o.per, o.samples);
  const times = new Map(targets.map((t) => [t.name, [] as number[]]));
  const errors = new Map(targets.map((t) => [t.name, 0]));
  const failures = new Map(targets.map((t) => [t.name, [] as string[]]));
  const windows = new Map(targets.map((t) => [t.name, [] as [number, number][]]));
  const probe = await startIdleProbe();
  let stalls: Stall[];
  try {
    for (let round = 0; round < Math.ceil(o.samples / per); round++) {
      for (const t of targets) {
        const b = await pacedBlock(t, o.rate, per, o.warm);
        times.get(t.name)!.push(...b.times);
        windows.get(t.name)!.push(b.window);
        errors.set(t.name, errors.get(t.name)! + b.errors);
        const kept = failures.get(t.name)!;
        kept.push(...b.failures.slice(0, FAILURES_KEPT - kept.length));
      }
    }
  } finally {
    stalls = await probe.stop();
  }
  for (const t of targets) reportFailures(t.name, errors.get(t.name)!, failures.get(t.name)!);
  return new Map(
    targets.map((t) => {
      const sorted = times.get(t.name)!.sort((a, b) => a - b);
      return [
        t.name,
        {
          p50: percentile(sorted, 0.5),
          p99: percentile(sorted, 0.99),
          errors: errors.get(t.name)!,
          failures: failures.get(t.name)!,
          idleStalled: stalledShare(stalls, windows.get(t.name)!),
        },
      ];
    }),
  );
}
