import type { ErrorCatalogue } from '../http/errors.js';

// The metrics endpoint's error codes (STYLE: Errors; docs/decisions/0086-error-catalogues.md), beside the
// common ones (src/http/errors.ts: NOT_FOUND, INVALID_TOKEN). docs/errors.md lists them.

export const METRICS_ERRORS = {
  METRICS_UNAVAILABLE: { status: 503, message: 'the cluster did not answer with its metrics; try again' },
} as const satisfies ErrorCatalogue;
