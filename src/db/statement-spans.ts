import type pg from 'pg';
import { boundToContext, statementSpan, tracer } from '../telemetry/spans.js';

// Each statement svc sends to PostgreSQL is a span when traced (CONTRACT §1: "database statements as
// spans"; src/telemetry/statements.ts), made here, at `query` of svc's own connections (the pool's and
// the read lane's). The `pg` instrumentation's patch of the driver, the other way to have them, costs a
// third of tracing's CPU on the chat path for two statements a call (decision 0144). Decided when a
// connection or pool is made: with tracing off, both are left as they are.

type Query = (...args: unknown[]) => unknown;
type Callback = (err: unknown, result?: unknown) => void;

/** The text of a statement as `query` takes it: a string, or a config object's `text`. */
function textOf(statement: unknown): string | undefined {
  if (typeof statement === 'string') return statement;
  const config = statement as { text?: unknown; submit?: unknown } | null;
  // A submittable (a cursor, a stream) reports its end through events of its own: not spanned.
  if (!config || typeof config.submit === 'function') return undefined;
  return typeof config.text === 'string' ? config.text : undefined;
}

/** `client.query` with a span around each statement sent while a span is active. */
export function traceStatements(client: pg.Client): void {
  if (!tracer()) return;
  const namespace = (client as unknown as { database?: string }).database;
  const query = client.query.bind(client) as Query;
  (client as unknown as { query: Query }).query = (...args) => {
    const text = textOf(args[0]);
    const done = text === undefined ? undefined : statementSpan(text, namespace);
    if (!done) return query(...args);
    const last = args.length - 1;
    if (typeof args[last] === 'function') {
      const callback = args[last] as Callback;
      args[last] = (err: unknown, result?: unknown) => {
        done(err ? { err } : undefined);
        callback(err, result);
      };
      return query(...args);
    }
    const result = query(...args);
    if (result instanceof Promise)
      result.then(
        () => done(),
        (err: unknown) => done({ err }),
      );
    else done();
    return result;
  };
}

/**
 * The pool's checkouts keep their caller's context: pg-pool hands a connection given back by one caller
 * to the next waiting one inside the first one's `release`, so a statement sent from the waiting caller's
 * callback (every `pool.query`) would otherwise be a span of the wrong request.
 */
export function traceCheckouts(pool: pg.Pool): void {
  if (!tracer()) return;
  const connect = pool.connect.bind(pool) as (callback?: Callback) => unknown;
  (pool as unknown as { connect: typeof connect }).connect = (callback) =>
    callback ? connect(boundToContext(callback)) : connect();
}
