import { tracesConfigured } from './telemetry/spans.js';

// The process entry (`npm start`, the cluster's workers, the tests' child processes). Traces first
// (CONTRACT §1): OpenTelemetry's instrumentations patch `http`, `pg` and `express` as they load, so
// src/telemetry/start.ts runs before the server's modules are imported, and only when an OTLP endpoint
// is configured (otherwise nothing of the SDK is loaded). Then the composition root (src/serve.ts).

try {
  if (tracesConfigured(process.env)) (await import('./telemetry/start.js')).startTracing();
  await (await import('./serve.js')).serve();
} catch (err: unknown) {
  process.stderr.write(
    `svc: failed to start: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(1);
}
