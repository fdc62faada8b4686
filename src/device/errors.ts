import type { ErrorCatalogue } from '../http/errors.js';

// The device flow's error codes (STYLE: Errors; docs/decisions/0086-error-catalogues.md; CONTRACT §6),
// beside the common ones (src/http/errors.ts). The poll's own answers (authorization_pending, slow_down,
// access_denied, expired_token) are states, not errors (RFC 8628 §3.5). docs/errors.md lists them.

export const DEVICE_ERRORS = {
  INVALID_USER_CODE: { status: 400, message: 'the user code is unknown, expired or already decided' },
  DEVICE_CODES_UNAVAILABLE: {
    status: 503,
    message: 'device codes cannot be read or written right now; try again',
  },
} as const satisfies ErrorCatalogue;
