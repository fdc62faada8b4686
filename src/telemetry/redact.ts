import { SpanStatusCode, type Attributes } from '@opentelemetry/api';
import type { Span, SpanProcessor } from '@opentelemetry/sdk-trace-node';

// No error's message in any span (docs/operations.md, Traces, "Never recorded"). svc's own spans fail
// with `error.type` alone (./spans.ts), but the http, express and pg instrumentations write the error's
// message into the failed span's status and an `exception` event, with a stack trace that repeats it: a
// PostgreSQL message can quote a value of the statement (`invalid input syntax for type uuid: "…"`), an
// Express handler's error the caller's input. This processor takes them out of every span as it ends,
// before any exporter sees it: the status keeps its code; an `exception` event keeps `exception.type`
// (the error's class or code). The pg instrumentation's own `exception.message` is kept: it writes no
// text of the error there, only its SQLSTATE (`PostgreSQL error of type 'error' occurred (code: 23514)`).
//
// `onEnding` is the SDK's hook for a span that is ending and still writable (marked experimental in
// sdk-trace 2.x): test/telemetry/telemetry-redaction.test.ts fails if it stops being called.

const PG_SCOPE = '@opentelemetry/instrumentation-pg';

function keptAttributes(attributes: Attributes, scope: string): Attributes {
  const kept: Attributes = {};
  if (attributes['exception.type'] !== undefined) kept['exception.type'] = attributes['exception.type'];
  if (scope === PG_SCOPE && attributes['exception.message'] !== undefined)
    kept['exception.message'] = attributes['exception.message'];
  return kept;
}

export const errorTextRedactor: SpanProcessor = {
  onStart() {},
  onEnding(span: Span) {
    if (span.status.code === SpanStatusCode.ERROR && span.status.message !== undefined)
      span.setStatus({ code: SpanStatusCode.ERROR });
    const events = span.events;
    for (let i = 0; i < events.length; i++) {
      const event = events[i]!;
      if (event.name !== 'exception' || !event.attributes) continue;
      events[i] = { ...event, attributes: keptAttributes(event.attributes, span.instrumentationScope.name) };
    }
  },
  onEnd() {},
  forceFlush: () => Promise.resolve(),
  shutdown: () => Promise.resolve(),
};
