import { ConfigError, loadConfig } from './config.js';
import { tracesConfigured } from './telemetry/spans.js';

// The process entry (`npm start`, the cluster's workers, the tests' child processes). The configuration
// first: a setting it refuses is told (exit 2) before any of the server's modules load, in a fraction
// of the seconds loading them takes. Then traces (CONTRACT §1): OpenTelemetry's instrumentations patch
// `http`, `pg` and `express` as they load, so src/telemetry/start.ts runs before the server's modules
// are imported, and only when an OTLP endpoint is configured (otherwise nothing of the SDK is loaded).
// Then the composition root (src/serve.ts).

try {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`svc: ${err.message}\n`);
    process.exit(2);
  }
  if (tracesConfigured(process.env)) (await import('./telemetry/start.js')).startTracing();
  await (await import('./serve.js')).serve(config);
} catch (err: unknown) {
  process.stderr.write(
    `svc: failed to start: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  process.exit(1);
}
