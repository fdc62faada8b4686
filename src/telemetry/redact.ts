import { SpanStatusCode, type Attributes } from '@opentelemetry/api';
import type { Span, SpanProcessor } from '@opentelemetry/sdk-trace-node';

// No error's message in any span (docs/operations.md, Traces, "Never recorded"). svc's own spans fail
// with `error.type` alone (./spans.ts, ./statements.ts), but the express instrumentation writes the
// error's message into the failed span's status and an `exception` event, with a stack trace that repeats
// it: an Express handler's error can quote the caller's input, or a PostgreSQL message that quotes a value
// of its statement (`invalid input syntax for type uuid: "…"`). This processor takes them out of every
// span as it ends, before any exporter sees it: the status keeps its code; an `exception` event keeps
// `exception.type` (the error's class or code).
//
// `onEnding` is the SDK's hook for a span that is ending and still writable (marked experimental in
// sdk-trace 2.x): test/telemetry/telemetry-redaction.test.ts fails if it stops being called.

function keptAttributes(attributes: Attributes): Attributes {
  const kept: Attributes = {};
  if (attributes['exception.type'] !== undefined) kept['exception.type'] = attributes['exception.type'];
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
      events[i] = { ...event, attributes: keptAttributes(event.attributes) };
    }
  },
  onEnd() {},
  forceFlush: () => Promise.resolve(),
  shutdown: () => Promise.resolve(),
};
