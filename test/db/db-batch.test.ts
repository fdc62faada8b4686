import { describe, expect, it } from 'vitest';
import { createBatcher } from '../../src/db/batch.js';

// The group-commit helper behind the model path's hot statements (src/db/batch.ts).

/** A batch's statement taking its time: it yields to the event loop once (no timer: nothing waits on its length). */
const aTurn = () => new Promise((r) => setImmediate(r));

describe('createBatcher', () => {
  it('sends a lone call at once, and groups the calls that arrive while a batch runs', async () => {
    const batches: number[][] = [];
    let running = 0;
    let peak = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const double = createBatcher<number, number>(async (xs) => {
      batches.push(xs);
      peak = Math.max(peak, ++running);
      if (batches.length === 1) await gate;
      running--;
      return xs.map((x) => x * 2);
    });
    const first = double(1);
    expect(batches).toEqual([[1]]); // sent at once, in the call itself
    const rest = [double(2), double(3), double(4)];
    expect(batches).toEqual([[1]]); // waiting for the batch in flight
    release();
    expect(await Promise.all([first, ...rest])).toEqual([2, 4, 6, 8]);
    expect(batches).toEqual([[1], [2, 3, 4]]);
    expect(peak).toBe(1); // the second batch began only once the first had ended
  });

  it('rejects only the caller whose result is an Error, and every caller when the batch throws', async () => {
    const pick = createBatcher<number, number>((xs) =>
      Promise.resolve(xs.map((x) => (x < 0 ? new Error(`negative ${x}`) : x))),
    );
    const results = await Promise.allSettled([pick(1), pick(-1), pick(2)]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect((results[1] as PromiseRejectedResult).reason).toEqual(new Error('negative -1'));

    const broken = createBatcher<number, number>(() => Promise.reject(new Error('database gone')));
    const all = await Promise.allSettled([broken(1), broken(2)]);
    expect(all).toEqual([
      { status: 'rejected', reason: new Error('database gone') },
      { status: 'rejected', reason: new Error('database gone') },
    ]);
  });

  it('keeps batches within maxBatch and runs up to maxInFlight at once', async () => {
    const sizes: number[] = [];
    let running = 0;
    let peak = 0;
    const echo = createBatcher<number, number>(
      async (xs) => {
        sizes.push(xs.length);
        peak = Math.max(peak, ++running);
        await aTurn();
        running--;
        return xs;
      },
      { maxBatch: 3, maxInFlight: 2 },
    );
    const out = await Promise.all(Array.from({ length: 10 }, (_, i) => echo(i)));
    expect(out).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(3);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(10);
    expect(peak).toBe(2);
  });

  it('fails loudly when a batch returns the wrong number of results', async () => {
    let calls = 0;
    const short = createBatcher<number, number>(async (xs) => (++calls === 1 ? (await aTurn(), xs) : [1]));
    const first = short(0); // in flight: the next two wait and go together
    const pair = Promise.all([short(1), short(2)]);
    await first;
    await expect(pair).rejects.toThrow(/1 results for 2 inputs/);
  });

  it('with isolateFailures, a batch that throws is retried one by one and fails only the bad input', async () => {
    const seen: number[][] = [];
    let first = true;
    const strict = createBatcher<number, number>(
      async (xs) => {
        seen.push(xs);
        if (first) {
          first = false;
          await aTurn();
          return xs;
        }
        if (xs.includes(13)) throw new Error('13 refused');
        return xs;
      },
      { isolateFailures: true },
    );
    const lead = strict(0);
    const results = await Promise.allSettled([strict(12), strict(13), strict(14)]);
    await lead;
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(seen).toEqual([[0], [12, 13, 14], [12], [13], [14]]);
  });
});
