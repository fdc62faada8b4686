import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import type { Deps } from '../deps.js';
import { asOutage } from '../db/outage.js';
import { sendError, type Surface } from './error-middleware.js';
import { devHostGuard } from './host-guard.js';
import { requestLogger } from './request-log.js';
import { nameRoute } from '../telemetry/spans.js';

// The few routes served ahead of Express (the chat call: decision 0001; the token request: decision 0021)
// take the same steps Express runs for their path, in the same order, the way Express runs a route's
// handlers: each step calls next(), or next(err) to answer with the error; after the last one, the route.
// The steps every request takes first (the request log, dev mode's Host guard) are listed once, here,
// for both ways in (src/app.ts mounts them on Express); each entry names only its own steps after them.

/** A step as Express middleware is written; a step may also answer with a promise that rejects. */
export type EntryStep<Req> = (req: Req, res: ServerResponse, next: (err?: unknown) => void) => unknown;

/** The steps every request takes before its route, on either way in: the request log, the Host guard. */
export function frontSteps(deps: Deps): EntryStep<IncomingMessage>[] {
  // Dev mode answers only its own Host names and loopback (CONTRACT §1: DNS rebinding; host-guard.ts).
  const hostGuard = devHostGuard(deps.config);
  return [requestLogger(deps.log, deps.config), ...(hostGuard ? [hostGuard] : [])];
}

/**
 * A row of the route table (src/app.ts: `entryTable`): a `POST path` route with its own steps, which Express
 * mounts as it is and, when `aheadOfExpress`, the node-level listener serves too (no query string); or a
 * `GET path` read (src/http/read-row.ts), which only the node-level listener serves, Express serving every
 * other request to its path with the route its module mounts.
 */
export interface FastEntry<Req extends IncomingMessage> {
  /** POST unless it says GET. */
  method?: 'GET' | 'POST';
  /** Express's spelling; a `:name` segment matches one segment without `%` and is read as `req.params.name`. */
  path: string;
  /** Whether the node-level listener serves it; Express serves it always as well (a query string, say). */
  aheadOfExpress: boolean;
  /** Beyond the method and the path, whether this request takes the node-level entry (else Express serves it). */
  accepts?(req: IncomingMessage): boolean;
  /** The shape its errors take, as Express's error middleware would render them. */
  surface: Surface;
  /** Its own steps, after the front steps. */
  steps: EntryStep<Req>[];
  route(req: Req, res: ServerResponse): Promise<void>;
}

/**
 * The server's listener: each of `entries` marked `aheadOfExpress` served here, every other request by
 * `app`. A database outage is 503 with Retry-After, as on every route (src/db/outage.ts), never a 500.
 */
export function servedAheadOfExpress(
  deps: Deps,
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- each entry reads its own request type
  entries: FastEntry<any>[],
  app: RequestListener,
): RequestListener {
  const front = frontSteps(deps);
  const find = entryFinder(
    entries.filter((e) => e.aheadOfExpress).map((e) => ({ ...e, steps: [...front, ...e.steps] })),
  );
  return (req: IncomingMessage, res: ServerResponse) => {
    const entry = find(req);
    if (!entry || (entry.accepts && !entry.accepts(req))) return app(req, res);
    nameRoute(entry.path); // the server span's name, as Express would give it (CONTRACT §1)
    const fail = (err: unknown) =>
      void asOutage(deps.db, err).then((e) => sendError(deps.log, e, req, res, entry.surface));
    runSteps(entry.steps, req, res, (r, s) => entry.route(r, s), fail);
  };
}

/** A request's row by its method and URL, or undefined; a row with `:name` segments sets req.params and req.route. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- each entry reads its own request type
function entryFinder<E extends FastEntry<any>>(entries: E[]): (req: IncomingMessage) => E | undefined {
  const exact = new Map<string, Map<string, E>>();
  const patterned: { entry: E; pattern: RegExp; names: string[] }[] = [];
  for (const entry of entries) {
    const method = entry.method ?? 'POST';
    const names = [...entry.path.matchAll(/:(\w+)/g)].map((m) => m[1]!);
    if (names.length) {
      const pattern = new RegExp(`^${entry.path.replace(/:\w+/g, '([^/%?]+)')}$`);
      patterned.push({ entry: { ...entry, method }, pattern, names });
    } else {
      if (!exact.has(method)) exact.set(method, new Map());
      exact.get(method)!.set(entry.path, entry);
    }
  }
  return (req) => {
    const url = req.url ?? '';
    const entry = exact.get(req.method ?? '')?.get(url);
    if (entry || !patterned.length) return entry;
    for (const { entry: row, pattern, names } of patterned) {
      const found = row.method === req.method ? pattern.exec(url) : null;
      if (!found || (row.accepts && !row.accepts(req))) continue;
      const matched = req as IncomingMessage & { params?: Record<string, string>; route?: { path: string } };
      matched.params = Object.fromEntries(names.map((name, i) => [name, found[i + 1]!]));
      // The route's template, as Express sets it: the metrics label (src/metrics/http.ts).
      matched.route = { path: row.path };
      return row;
    }
    return undefined;
  };
}

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

/** One Express-style step awaited inside a route (a body parser, a guard): resolves on next(), rejects on next(err). */
export function stepDone<Req>(step: EntryStep<Req>, req: Req, res: ServerResponse): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- a step's error goes on as given, as Express passes on next(err)
    const fail = (err: unknown) => reject(err);
    const pending = step(req, res, (err?: unknown) => (err ? fail(err) : resolve()));
    if (pending instanceof Promise) pending.catch(fail);
  });
}
