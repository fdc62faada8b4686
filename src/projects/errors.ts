import type { ErrorCatalogue } from '../http/errors.js';

// The projects domain's error codes (STYLE: Errors; docs/decisions/0086-error-catalogues.md), beside the
// common ones (NOT_FOUND, NO_ACCESS, VALIDATION_ERROR: src/http/errors.ts). REST answers them as
// {detail: {code, message}}; an MCP tool's failure message starts with the code (CONTRACT §10).

export const PROJECT_ERRORS = {
  CONFLICT: { status: 409, message: 'the share changed while it was being written; try again' },
  FILE_TOO_LARGE: { status: 413, message: 'a file holds at most 5 MB' },
  QUOTA_EXCEEDED: { status: 413, message: 'the project holds at most 50 MB of files' },
} as const satisfies ErrorCatalogue;
