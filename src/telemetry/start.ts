import { register } from 'node:module';
import { readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Span,
} from '@opentelemetry/api';
import { getRPCMetadata, RPCType } from '@opentelemetry/core';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { HttpInstrumentation } from '@opentelemetry/instrumentation-http';
import { ExpressInstrumentation, ExpressLayerType } from '@opentelemetry/instrumentation-express';
import { PgInstrumentation } from '@opentelemetry/instrumentation-pg';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { enableTracing, type SpanStart } from './spans.js';
import { instrumentPglite } from './pglite.js';
import { errorTextRedactor } from './redact.js';

// Starts OpenTelemetry's SDK for Node (CONTRACT §1, Traces). src/main.ts imports this module only when
// an OTLP endpoint is configured, and before anything that serves: the instrumentations patch `http`,
// `pg` and `express` as they load. What it sets up (docs/operations.md, Traces):
//
// - the exporter: OTLP/HTTP to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT +
//   `/v1/traces`, in protobuf or JSON as OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL says (default
//   http/protobuf, the specification's); headers, timeout and compression from their OTEL_ variables
//   (read by the exporter itself). Spans leave in batches (OTEL_BSP_* honoured).
// - the resource: service.name `svc` unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise.
// - the sampler: OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on, read by the
//   SDK); an incoming W3C `traceparent` is continued (the W3C trace-context and baggage propagators).
// - the instrumentations: `http` (a server span for every request, the chat and token entries that skip
//   Express included), `express` (the route in the server span's name; its request handlers as spans),
//   `pg` (each statement a span, under a request only: heartbeats and background sweeps make no traces;
//   its text with placeholders, never the values); the embedded PGlite's statements the same (./pglite.ts).
// - no error's message in any span (./redact.ts), whichever instrumentation wrote it.

const SERVICE_VERSION = (() => {
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version?: string;
    };
    return pkg.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
})();

const KINDS = { server: SpanKind.SERVER, client: SpanKind.CLIENT, internal: SpanKind.INTERNAL } as const;

function exporterFor(env: NodeJS.ProcessEnv) {
  const protocol = (
    env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ??
    env.OTEL_EXPORTER_OTLP_PROTOCOL ??
    'http/protobuf'
  )
    .trim()
    .toLowerCase();
  if (protocol === 'http/json') return new JsonExporter();
  if (protocol !== 'http/protobuf')
    process.stderr.write(
      `svc: OTEL_EXPORTER_OTLP_PROTOCOL=${protocol} is not supported; using http/protobuf\n`,
    );
  return new ProtobufExporter();
}

/** A request's path for its span: never the query string's values (they can carry codes and tokens). */
function queryNamesOnly(search: string): string {
  return [...new URLSearchParams(search).keys()].map((k) => `${k}=REDACTED`).join('&');
}

/**
 * A request target's path and query (`?…`, empty when none). Split by hand: parsing it as a URL was the
 * largest part of this hook's cost, on every request (decision 0121).
 */
function splitTarget(target: string): { path: string; search: string } {
  const at = target.indexOf('?');
  if (at < 0) return { path: target, search: '' };
  return { path: target.slice(0, at), search: at === target.length - 1 ? '' : target.slice(at) };
}

/** Share links carry their secret in the path (`/s/<token>`): the span gets the route instead. The path
 * is the request's as sent (`/x/../s/<token>` too), so the segment is found wherever it stands. */
const SECRET_PATHS: [RegExp, string][] = [[/\/s\/[^/]+/g, '/s/:token']];

function safePath(path: string): string {
  for (const [pattern, replacement] of SECRET_PATHS) path = path.replace(pattern, replacement);
  return path;
}

/** `url.path` and `url.query` of a request target: no share-link token, no query value. */
export function targetAttributes(target: string): Record<string, string> {
  const { path, search } = splitTarget(target);
  return search
    ? { 'url.path': safePath(path), 'url.query': queryNamesOnly(search) }
    : { 'url.path': safePath(path) };
}

export function startTracing(env: NodeJS.ProcessEnv = process.env): void {
  // ESM modules are patched through import-in-the-middle's loader hook, for the instrumented packages alone.
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url, {
    data: { include: ['express', 'pg', 'pg-pool', 'http', 'node:http'] },
  });
  const resource = resourceFromAttributes({
    'service.name': 'svc',
    'service.version': SERVICE_VERSION,
  }).merge(detectResources({ detectors: [envDetector] }));
  const provider = new NodeTracerProvider({
    resource,
    // Every span loses its error text as it ends (./redact.ts), before the batch takes it.
    spanProcessors: [errorTextRedactor, new BatchSpanProcessor(exporterFor(env))],
  });
  provider.register();
  registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [
      new HttpInstrumentation({
        // Incoming requests: the path without secrets, the query's names only, the peer's address (a
        // client-written X-Forwarded-For is not an address svc trusts: CONTRACT §1, TRUST_PROXY).
        startIncomingSpanHook: (request: IncomingMessage) => {
          const where = targetAttributes(request.url ?? '/');
          const peer = request.socket.remoteAddress;
          return peer ? { ...where, 'client.address': peer } : where;
        },
      }),
      new ExpressInstrumentation({
        // Every middleware as a span would be a dozen per request: the handlers and the route suffice.
        ignoreLayersType: [ExpressLayerType.MIDDLEWARE, ExpressLayerType.ROUTER],
      }),
      // Statements only: a pool checkout or a new connection is no statement (CONTRACT §1), and its span
      // cost as much as the statement's on the chat path (decision 0121).
      new PgInstrumentation({
        requireParentSpan: true,
        enhancedDatabaseReporting: false,
        ignoreConnectSpans: true,
      }),
    ],
  });
  const tracer = provider.getTracer('svc', SERVICE_VERSION);
  instrumentPglite(provider.getTracer('svc-pglite', SERVICE_VERSION));
  enableTracing({
    tracer,
    start: (name: string, options: SpanStart, parent?) =>
      tracer.startSpan(
        name,
        {
          kind: KINDS[options.kind ?? 'internal'],
          ...(options.attributes ? { attributes: options.attributes } : {}),
        },
        parent ?? context.active(),
      ),
    within: (span: Span, fn) => context.with(trace.setSpan(context.active(), span), fn),
    active: () => context.active(),
    inContext: (ctx, fn) => context.with(ctx, fn),
    extract: (headers) => propagation.extract(ROOT_CONTEXT, headers),
    route(route) {
      const rpc = getRPCMetadata(context.active());
      if (rpc?.type === RPCType.HTTP) rpc.route = route;
    },
    fail(span, err) {
      const code = (err as { code?: unknown } | null)?.code;
      const type = typeof code === 'string' ? code : err instanceof Error ? err.constructor.name : 'error';
      span.setAttribute('error.type', type);
      span.setStatus({ code: SpanStatusCode.ERROR });
    },
    shutdown: () => provider.shutdown(),
  });
}
