import {
  context,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Span,
  type Tracer,
} from '@opentelemetry/api';

// A database statement's client span (CONTRACT §1: "database statements as spans"), one shape for both
// storages: PostgreSQL's statements, made where svc's database client sends them (src/db/statement-spans.ts),
// and the embedded PGlite's (./pglite.ts). Named `pg.query:{COMMAND}` (the statement's first word, upper
// case), with db.system.name `postgresql`, db.namespace (the database's name, where it has one) and
// db.query.text: the text with its placeholders, never the values. Made only while a span is active, so
// that the heartbeat and the background sweeps make no traces of their own. A failed statement's span
// has status ERROR and error.type its SQLSTATE, never the message (a PostgreSQL message can quote a value
// of its statement). Why svc makes them rather than the `pg` instrumentation: decision 0144.

export const STATEMENT_PREFIX = 'pg.query:';

/** The statement's command: its first word, upper case (`SELECT`, `INSERT`, `WITH`). */
export function commandOf(text: string): string {
  let start = 0;
  while (start < text.length && text.charCodeAt(start) <= 32) start++;
  let end = start;
  while (end < text.length && text.charCodeAt(end) > 32 && text[end] !== ';' && text[end] !== '(') end++;
  return text.slice(start, end).toUpperCase();
}

/** Ends a statement's span; a failure (the driver's error) fails it first. */
export type StatementDone = (failure?: { err: unknown }) => void;

/** A statement's span, or undefined when no span is active (nothing to hang it on). */
export function startStatement(tracer: Tracer, text: string, namespace?: string): StatementDone | undefined {
  const parent = context.active();
  if (trace.getSpan(parent) === undefined) return undefined;
  const attributes: Attributes = { 'db.system.name': 'postgresql', 'db.query.text': text };
  if (namespace) attributes['db.namespace'] = namespace;
  const span = tracer.startSpan(
    STATEMENT_PREFIX + commandOf(text),
    { kind: SpanKind.CLIENT, attributes },
    parent,
  );
  return (failure) => {
    if (failure) fail(span, failure.err);
    span.end();
  };
}

function fail(span: Span, err: unknown) {
  const code = (err as { code?: unknown } | null)?.code;
  span.setAttribute(
    'error.type',
    typeof code === 'string' ? code : err instanceof Error ? err.constructor.name : 'error',
  );
  span.setStatus({ code: SpanStatusCode.ERROR });
}
