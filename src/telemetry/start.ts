import { register } from 'node:module';
import { readFileSync } from 'node:fs';
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
import { ExpressInstrumentation, ExpressLayerType } from '@opentelemetry/instrumentation-express';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { enableTracing, type SpanStart } from './spans.js';
import { instrumentPglite } from './pglite.js';
import { startStatement } from './statements.js';
import { serverSpans } from './server-span.js';
import { errorTextRedactor } from './redact.js';

// Starts OpenTelemetry's SDK for Node (CONTRACT §1, Traces). src/main.ts imports this module only when
// an OTLP endpoint is configured, and before anything that serves: the instrumentations patch `pg` and
// `express` as they load. What it sets up (docs/operations.md, Traces):
//
// - the exporter: OTLP/HTTP to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or OTEL_EXPORTER_OTLP_ENDPOINT +
//   `/v1/traces`, in protobuf or JSON as OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL says (default
//   http/protobuf, the specification's); headers, timeout and compression from their OTEL_ variables
//   (read by the exporter itself). Spans leave in batches (OTEL_BSP_* honoured).
// - the resource: service.name `svc` unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise.
// - the sampler: OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on, read by the
//   SDK); an incoming W3C `traceparent` is continued (the W3C trace-context and baggage propagators).
// - the server span of each request: svc's own, made where it takes the request (./server-span.ts,
//   decision 0134), continuing an incoming traceparent; the `http` instrumentation is not used.
// - the instrumentation: `express` (the matched route, which names the server span; its request
//   handlers as spans).
// - database statements: svc's own spans (./statements.ts, decision 0144), made where src/db sends a
//   statement to PostgreSQL and where one enters the embedded PGlite (./pglite.ts): under a request
//   only (heartbeats and background sweeps make no traces), the text with placeholders, never values.
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

export function startTracing(env: NodeJS.ProcessEnv = process.env): void {
  // ESM modules are patched through import-in-the-middle's loader hook, for the instrumented package alone.
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url, {
    data: { include: ['express'] },
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
      new ExpressInstrumentation({
        // Every middleware as a span would be a dozen per request: the handlers and the route suffice.
        ignoreLayersType: [ExpressLayerType.MIDDLEWARE, ExpressLayerType.ROUTER],
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
    statement: (text, namespace) => startStatement(tracer, text, namespace),
    bind(fn) {
      const ctx = context.active();
      return (...args) => context.with(ctx, fn, undefined, ...args);
    },
    serve: serverSpans(tracer),
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
