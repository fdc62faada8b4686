import type { IncomingHttpHeaders, RequestListener } from 'node:http';
import type { Attributes, Context, Span, Tracer } from '@opentelemetry/api';
import type { StatementDone } from './statements.js';

// Spans (CONTRACT §1, Traces) as every layer writes them: withSpan around a piece of work, spanned around a
// function built once, the context a group-committed batch runs in. Tracing is on only once
// src/telemetry/start.ts has run (src/main.ts imports it when an OTLP endpoint is configured); until then
// every helper here is a plain call of the work it wraps: nothing of OpenTelemetry is loaded (the types
// below are erased) and no span object is made (docs/operations.md, Traces).

/** What start.ts hands over once the SDK runs. */
export interface Tracing {
  tracer: Tracer;
  /** A child span of the active context, or of `parent` when given. */
  start(name: string, options: SpanStart, parent?: Context): Span;
  /** `fn` with `span` as the active span. */
  within<T>(span: Span, fn: () => T): T;
  active(): Context;
  inContext<T>(ctx: Context, fn: () => T): T;
  /** The W3C trace context of `headers` (traceparent, tracestate), or none: the parent of a new trace. */
  extract(headers: IncomingHttpHeaders): Context;
  /** `listener` with a server span around each request (./server-span.ts). */
  serve(listener: RequestListener): RequestListener;
  /** Names the HTTP server span of the request in progress by its route (`POST /v1/chat/completions`). */
  route(route: string): void;
  /** A database statement's span (./statements.ts), or undefined outside any span. */
  statement(text: string, namespace?: string): StatementDone | undefined;
  /** `fn` run in the context active now, whenever it is called. */
  bind<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => R;
  /** Marks `span` failed: status ERROR and `error.type` (never the message: it may quote input). */
  fail(span: Span, err: unknown): void;
  /** Exports what is buffered and stops. */
  shutdown(): Promise<void>;
}

export interface SpanStart {
  kind?: 'server' | 'client' | 'internal';
  attributes?: Attributes;
}

let tracing: Tracing | null = null;

/** Called once by start.ts. */
export function enableTracing(t: Tracing): void {
  tracing = t;
}

export function tracer(): Tracing | null {
  return tracing;
}

/**
 * Whether the environment asks for traces (CONTRACT §1): an OTLP endpoint for traces or for every signal,
 * and the SDK not switched off (OTEL_SDK_DISABLED=true, the standard variable).
 */
export function tracesConfigured(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  return !!(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim());
}

/** `fn` inside a span named `name` (ended when `fn` settles, failed when it throws). */
export function withSpan<T>(
  name: string,
  options: SpanStart & { parentHeaders?: IncomingHttpHeaders },
  fn: (span: Span | undefined) => Promise<T>,
): Promise<T> {
  const t = tracing;
  if (!t) return fn(undefined);
  const span = t.start(name, options, options.parentHeaders ? t.extract(options.parentHeaders) : undefined);
  return t.within(span, async () => {
    try {
      return await fn(span);
    } catch (err) {
      t.fail(span, err);
      throw err;
    } finally {
      span.end();
    }
  });
}

/**
 * `fn` with a span around each call, the span's attributes from its input (`before`) and its result
 * (`after`). Decided when it is built: with tracing off, `fn` itself is returned.
 */
export function spanned<I, O>(
  name: string,
  fn: (input: I) => Promise<O>,
  describe: { before?: (input: I) => Attributes; after?: (output: O) => Attributes } = {},
): (input: I) => Promise<O> {
  if (!tracing) return fn;
  return (input) =>
    withSpan(name, { attributes: describe.before?.(input) }, async (span) => {
      const output = await fn(input);
      if (describe.after) span?.setAttributes(describe.after(output));
      return output;
    });
}

/**
 * A span for a database statement of `text` about to be sent (CONTRACT §1: database statements as spans;
 * ./statements.ts), or undefined: tracing off, or no span active (a heartbeat, a sweep). The caller
 * calls what it returns when the statement's answer (or failure) came.
 */
export function statementSpan(text: string, namespace?: string): StatementDone | undefined {
  return tracing?.statement(text, namespace);
}

/** `pending`, with its statement's span ended when it settles (a failure fails the span first). */
export function statementSettled<T>(done: StatementDone, pending: Promise<T>): Promise<T> {
  return pending.then(
    (result) => {
      done();
      return result;
    },
    (err: unknown) => {
      done({ err });
      throw err;
    },
  );
}

/**
 * `fn`, called later from work that does not carry the caller's context (a pooled connection handed over
 * by another caller's release), run in the context active now. With tracing off, `fn` itself.
 */
export function boundToContext<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => R {
  return tracing ? tracing.bind(fn) : fn;
}

/** The active context, to run later work in (a batch serving several callers: src/db/batch.ts). */
export function captureContext(): Context | undefined {
  return tracing?.active();
}

export function runInContext<T>(ctx: Context | undefined, fn: () => T): T {
  return ctx && tracing ? tracing.inContext(ctx, fn) : fn();
}

/**
 * The server's listener with a server span around each request (CONTRACT §1: each request a server span).
 * Decided when it is built: with tracing off, `listener` itself.
 */
export function tracedRequests(listener: RequestListener): RequestListener {
  return tracing ? tracing.serve(listener) : listener;
}

/** Names the request's server span by its route, for entries that Express, which would, never sees. */
export function nameRoute(route: string): void {
  tracing?.route(route);
}

/** Exports the spans still buffered (at shutdown). */
export async function stopTracing(): Promise<void> {
  await tracing?.shutdown();
}

/**
 * An MCP tool call's span `execute_tool {name}` (CONTRACT §1; the GenAI semantic conventions). Its
 * arguments and result are never recorded; a result marked isError fails the span.
 */
export function withToolSpan<R extends { isError?: boolean }>(
  name: string,
  fn: () => Promise<R>,
): Promise<R> {
  if (!tracing) return fn();
  const attributes = { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': name };
  return withSpan(`execute_tool ${name}`, { attributes }, async (span) => {
    const result = await fn();
    if (result.isError && span) tracing?.fail(span, { code: 'tool_error' });
    return result;
  });
}

/** A span for something that took no time of its own here (a hold taken ahead by an earlier statement). */
export function markSpan(name: string, attributes: Attributes): void {
  tracing?.start(name, { attributes }).end();
}
