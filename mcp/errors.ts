import type { ErrorCatalogue } from '../src/http/errors.js';

// The MCP face's own error codes (STYLE: Errors; decision records 0086, 0120 and 0106), beside the common
// ones (src/http/errors.ts: VALIDATION_ERROR, insufficient_scope, NO_ACCESS, NOT_FOUND…), the projects'
// (src/projects/errors.ts) its tools answer with, and RFC 6750's invalid_token (oauth/errors.ts). The face
// prints each code as written: a failed tool's text and an HTTP-level JSON-RPC error's message start with
// it (CONTRACT §10).

export const MCP_ERRORS = {
  UNAUTHORIZED: { status: 401, message: 'this resource needs a platform access token' },
  FORBIDDEN_ORIGIN: { status: 403, message: 'requests from this Origin are not allowed' },
  INVALID_REQUEST: {
    status: 400,
    message:
      'an unknown tool or toolset, or a selection header (X-MCP-Readonly) with a value it does not take',
  },
} as const satisfies ErrorCatalogue;
