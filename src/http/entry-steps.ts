import type { IncomingMessage, ServerResponse } from 'node:http';

// The node-level entries ahead of Express (the chat call: src/models/chat-entry.ts; the token request:
// oauth/token-entry.ts) run the same steps Express mounts for their path, the way Express runs a
// route's handlers: each step calls next(), or next(err) to answer with the error; after the last one,
// the route. One runner for both, so the two entries cannot drift apart in how a step fails.

/** A step as Express middleware is written; a step may also answer with a promise that rejects. */
export type EntryStep<Req> = (req: Req, res: ServerResponse, next: (err?: unknown) => void) => unknown;

/**
 * Runs `steps` in order, then `route`. An error passed to next, thrown by a step, or rejected by a step's
 * promise (the metadata-fetch limit's rate limiter refuses so) or by the route goes to `fail`.
 */
export function runSteps<Req extends IncomingMessage>(
  steps: EntryStep<Req>[],
  req: Req,
  res: ServerResponse,
  route: (req: Req, res: ServerResponse) => Promise<void>,
  fail: (err: unknown) => void,
): void {
  let i = 0;
  const next = (err?: unknown) => {
    if (err) return fail(err);
    const step = steps[i++];
    if (!step) return void route(req, res).catch(fail);
    try {
      const pending = step(req, res, next);
      if (pending instanceof Promise) pending.catch(fail);
    } catch (thrown) {
      fail(thrown);
    }
  };
  next();
}
