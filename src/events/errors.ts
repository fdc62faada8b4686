import type { ErrorCatalogue } from '../http/errors.js';

// The webhook endpoints' error codes (STYLE: Errors; docs/decisions/0086-error-catalogues.md), beside the
// common ones (src/http/errors.ts: VALIDATION_ERROR, NOT_FOUND, NO_ACCESS). docs/errors.md lists them.

export const EVENT_ERRORS = {
  TOO_MANY_ENDPOINTS: { status: 409, message: 'the client has as many webhook endpoints as it may hold' },
} as const satisfies ErrorCatalogue;
