// Group commit for hot statements. Under load, every model call needs the same few statements (look up
// the token, take a lease, hold credits, settle); one round trip per call per statement made PostgreSQL
// parse, plan and commit thousands of tiny statements a second and cost the server more in socket
// writes than in its own work (docs/models.md, Performance). A batcher hands each caller's input to a
// statement that serves many at once: at most `maxInFlight` batches run together, and whatever arrives
// meanwhile waits for the next one. Alone, a call goes at once in a batch of one, so it adds no latency
// when the server is quiet.
//
// Traced (CONTRACT §1), a batch runs in the context of its first caller: its statement is a span of that
// call's trace (src/telemetry/spans.ts), and the other callers' spans wait beside it.

import { captureContext, runInContext } from '../telemetry/spans.js';

export interface BatcherOptions {
  /** Batches running at once (1 keeps writes to one hot row in a single queue). */
  maxInFlight?: number;
  /** Most inputs in one batch; the rest wait for the next. */
  maxBatch?: number;
  /**
   * When a batch of several throws, run its inputs again one by one, so that one input the statement
   * refuses fails only its own caller. (A batch statement is one transaction: it failed whole.)
   */
  isolateFailures?: boolean;
}

/**
 * `run` gets the inputs of one batch and returns one result per input, in the same order; a result that
 * is an Error rejects only its own caller. A `run` that throws rejects every caller of that batch.
 */
export function createBatcher<I, O>(
  run: (inputs: I[]) => Promise<(O | Error)[]>,
  options: BatcherOptions = {},
): (input: I) => Promise<O> {
  const maxInFlight = options.maxInFlight ?? 1;
  const maxBatch = options.maxBatch ?? 256;
  let queue: {
    input: I;
    resolve: (o: O) => void;
    reject: (e: unknown) => void;
    context: ReturnType<typeof captureContext>;
  }[] = [];
  let inFlight = 0;

  const runIsolated = async (inputs: I[]): Promise<(O | Error)[]> => {
    try {
      return await run(inputs);
    } catch (err) {
      if (!options.isolateFailures || inputs.length === 1) throw err;
      return Promise.all(
        inputs.map((input) =>
          run([input]).then(
            (r) => r[0]!,
            (e: unknown) => (e instanceof Error ? e : new Error(String(e))),
          ),
        ),
      );
    }
  };

  async function runOne(batch: typeof queue) {
    try {
      const results = await runIsolated(batch.map((b) => b.input));
      if (results.length !== batch.length)
        throw new Error(`batch returned ${results.length} results for ${batch.length} inputs`);
      batch.forEach((b, i) => {
        const r = results[i]!;
        if (r instanceof Error) b.reject(r);
        else b.resolve(r);
      });
    } catch (err) {
      for (const b of batch) b.reject(err);
    }
  }

  function pump() {
    while (inFlight < maxInFlight && queue.length > 0) {
      const batch = queue.length <= maxBatch ? queue : queue.slice(0, maxBatch);
      queue = queue.length <= maxBatch ? [] : queue.slice(maxBatch);
      inFlight++;
      void runInContext(batch[0]!.context, () => runOne(batch)).finally(() => {
        inFlight--;
        pump();
      });
    }
  }

  return (input) =>
    new Promise<O>((resolve, reject) => {
      queue.push({ input, resolve, reject, context: captureContext() });
      pump();
    });
}
