import type { ErrorCatalogue } from '../http/errors.js';

// The model rate limits' error codes (STYLE: Errors; docs/decisions/0086-error-catalogues.md; CONTRACT
// §11), beside the common ones (src/http/errors.ts). They answer on the model routes and in run frames,
// which lower-case every code: RATE_LIMIT_UNAVAILABLE is rate_limit_unavailable on the wire.

export const RATELIMIT_ERRORS = {
  rate_limit_exceeded: {
    status: 429,
    message: 'a requests- or tokens-per-minute window is full; Retry-After says when the call fits',
    spelledBy: 'CONTRACT §11',
  },
  RATE_LIMIT_UNAVAILABLE: { status: 503, message: 'the rate limiter cannot be reached; try again' },
} as const satisfies ErrorCatalogue;
