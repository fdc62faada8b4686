// Group commit for refresh-token redemptions (issue 18 item 5): while one redeeming statement is in
// flight, the refreshes that reach it meanwhile wait and then go together, in one statement and one
// commit. A lone refresh goes at once, as before; under load the batch grows with the queue, and
// PostgreSQL's per-statement and per-commit work (the executor's start, the WAL flush) and the
// process's per-query work are paid once per batch (docs/oauth.md, Checks and benchmark).
// Each request is still answered only after the commit that rotated its token: nothing is less durable.

/** The most redemptions one statement carries; more wait for the next one. */
export const MAX_BATCH = 64;

interface Waiting<I, O> {
  input: I;
  resolve: (out: O) => void;
  reject: (err: unknown) => void;
}

export interface Batcher<I, O> {
  /** Runs `input` in the next batch; resolves with its own result. */
  submit(input: I): Promise<O>;
}

/**
 * One statement in flight at a time. `run` gets the inputs of a batch and answers one result per input,
 * in the same order; when it fails, every request of that batch fails with its error.
 */
export function createBatcher<I, O>(run: (inputs: I[]) => Promise<O[]>): Batcher<I, O> {
  const queue: Waiting<I, O>[] = [];
  let inFlight = false;

  const flush = () => {
    const batch = queue.splice(0, MAX_BATCH);
    inFlight = true;
    void run(batch.map((w) => w.input))
      .then(
        (outs) => batch.forEach((w, i) => w.resolve(outs[i]!)),
        (err: unknown) => batch.forEach((w) => w.reject(err)),
      )
      .finally(() => {
        inFlight = false;
        if (queue.length > 0) flush();
      });
  };

  return {
    submit(input) {
      return new Promise<O>((resolve, reject) => {
        queue.push({ input, resolve, reject });
        if (!inFlight) flush();
      });
    },
  };
}
