import { performance } from 'node:perf_hooks';

// The proxy bench's chat JSON row (chat JSON at a paced 200 req/s, time added over the
// provider): non-streamed calls sent open-loop at a fixed rate — one call every 1000/rate ms, whether or
// not the previous ones answered, as real traffic arrives — each timed alone on a monotonic clock, to
// the last byte of its body. Targets take turns in blocks (the first few calls of each block unrecorded),
// as the first-byte phase does, so a drift of the machine falls on every target alike; a target's added
// time is its percentile minus the provider's own (`direct`) at the same percentile.

export interface PacedTarget {
  name: string;
  /** One call, resolved when its whole body was read; rejects on a non-200. */
  call(): Promise<void>;
}

export interface PacedFigures {
  p50: number;
  p99: number;
  errors: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One block at `rate` calls/s: the latencies of its calls after the first `warm`, and its errors. */
export async function pacedBlock(t: PacedTarget, rate: number, calls: number, warm: number) {
  const gap = 1000 / rate;
  const start = performance.now();
  const times: number[] = [];
  let errors = 0;
  const pending: Promise<void>[] = [];
  for (let i = 0; i < warm + calls; i++) {
    const due = start + i * gap;
    const wait = due - performance.now();
    if (wait > 0.5) await sleep(wait);
    const sent = performance.now();
    pending.push(
      t.call().then(
        () => {
          if (i >= warm) times.push(performance.now() - sent);
        },
        () => void errors++,
      ),
    );
  }
  await Promise.all(pending);
  return { times, errors };
}

/** The `q` quantile of ascending `sorted` (NaN when empty). */
export const percentile = (sorted: number[], q: number) =>
  sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))]! : NaN;

/** Every target's p50 / p99 latency at `rate` calls/s over `samples` recorded calls, in turns of `per`. */
export async function pacedJson(
  targets: PacedTarget[],
  o: { rate: number; samples: number; per: number; warm: number },
): Promise<Map<string, PacedFigures>> {
  const per = Math.min(o.per, o.samples);
  const times = new Map(targets.map((t) => [t.name, [] as number[]]));
  const errors = new Map(targets.map((t) => [t.name, 0]));
  for (let round = 0; round < Math.ceil(o.samples / per); round++) {
    for (const t of targets) {
      const b = await pacedBlock(t, o.rate, per, o.warm);
      times.get(t.name)!.push(...b.times);
      errors.set(t.name, errors.get(t.name)! + b.errors);
    }
  }
  return new Map(
    targets.map((t) => {
      const sorted = times.get(t.name)!.sort((a, b) => a - b);
      return [
        t.name,
        { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), errors: errors.get(t.name)! },
      ];
    }),
  );
}
