import type { Tracer } from '@opentelemetry/api';
import { PGlite, type Transaction } from '@electric-sql/pglite';
import { startStatement } from './statements.js';
import { statementSettled } from './spans.js';

// Statement spans for the embedded PostgreSQL (PGlite), the same as svc makes for a PostgreSQL server
// (./statements.ts; CONTRACT §1: "database statements as spans"; docs/operations.md, Traces): a client
// span `pg.query:{COMMAND}` per statement, `db.system.name` postgresql and `db.query.text` (the text with
// its placeholders, never the values), made only inside a trace (the background sweeps make none),
// failed with `error.type` (the SQLSTATE), never the message. PGlite is no module of the pg driver's:
// its statements are counted where they enter it, at `query`/`exec` of the instance and of a
// transaction's handle. The BEGIN and COMMIT PGlite's `transaction` sends itself are not statements of
// svc's and have no span (with `pg`, drizzle sends them and they do).

type Statement = (this: unknown, text: string, ...rest: unknown[]) => Promise<unknown>;

/** `run` wrapped: a span around each statement made while a span is active. */
function spannedStatement(tracer: Tracer, run: Statement): Statement {
  return function statement(this: unknown, text, ...rest) {
    const done = typeof text === 'string' ? startStatement(tracer, text) : undefined;
    if (!done) return run.call(this, text, ...rest);
    return statementSettled(done, run.call(this, text, ...rest));
  };
}

let instrumented = false;

/** Patches PGlite's statement entries (once; every instance, made before or after). */
export function instrumentPglite(tracer: Tracer): void {
  if (instrumented) return;
  instrumented = true;
  const proto = PGlite.prototype as unknown as Record<'query' | 'exec' | 'transaction', unknown>;
  const query = proto.query as Statement;
  const exec = proto.exec as Statement;
  const begin = proto.transaction as (this: PGlite, fn: (tx: Transaction) => Promise<unknown>) => unknown;
  // `sql` of an instance goes through its `query`; a transaction's handle has its own `query` and `exec`
  // (its `sql`, which svc does not use, has no span).
  proto.query = spannedStatement(tracer, query);
  proto.exec = spannedStatement(tracer, exec);
  proto.transaction = function transaction(this: PGlite, fn: (tx: Transaction) => Promise<unknown>) {
    return begin.call(this, (tx) => {
      const handle = tx as unknown as Record<'query' | 'exec', unknown>;
      const txQuery = handle.query as Statement;
      const txExec = handle.exec as Statement;
      handle.query = spannedStatement(tracer, txQuery);
      handle.exec = spannedStatement(tracer, txExec);
      return fn(tx);
    });
  };
}
