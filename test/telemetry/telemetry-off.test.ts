import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { spanned, tracer, tracesConfigured, withSpan, withToolSpan } from '../../src/telemetry/spans.js';

// CONTRACT §1, Traces: "unset: nothing is exported and nothing costs". The test server, like svc without
// an OTLP endpoint, never starts the SDK: every helper is then the work it wraps, and the modules every
// call passes through import nothing of OpenTelemetry at run time (types only, erased).

describe('traces off', () => {
  it('is off unless an OTLP endpoint is set and the SDK not disabled', () => {
    expect(tracesConfigured({})).toBe(false);
    expect(tracesConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' })).toBe(false);
    expect(tracesConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toBe(true);
    expect(tracesConfigured({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' })).toBe(true);
    expect(
      tracesConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'true' }),
    ).toBe(false);
  });

  it('makes no span: each helper is the work it wraps', async () => {
    expect(tracer()).toBeNull();
    const work = (n: number) => Promise.resolve(n * 2);
    expect(spanned('svc.hold', work)).toBe(work);
    let seen: unknown = 'unset';
    expect(
      await withSpan('x', {}, (span) => {
        seen = span;
        return Promise.resolve(7);
      }),
    ).toBe(7);
    expect(seen).toBeUndefined();
    expect(await withToolSpan('list_projects', () => Promise.resolve({ isError: true }))).toEqual({
      isError: true,
    });
  });

  it('loads nothing of OpenTelemetry on the paths every call takes', () => {
    // src/telemetry/start.ts alone imports the SDK, and only src/main.ts (when configured) and the proxy
    // bench import it.
    for (const file of ['src/telemetry/spans.ts', 'src/telemetry/model-call.ts', 'src/main.ts']) {
      const source = readFileSync(file, 'utf8');
      const imports = source.match(/^import[^;]*from '@opentelemetry\/[^']+';/gm) ?? [];
      for (const line of imports) expect(line, file).toMatch(/^import type /);
      expect(source, file).not.toMatch(/import\('@opentelemetry/);
    }
  });
});
