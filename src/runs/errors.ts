import type { ErrorCatalogue } from '../http/errors.js';

// The run socket's error codes (STYLE: Errors; decision records 0086 and 0120), beside the common ones
// (src/http/errors.ts) and billing's CLIENT_DELETED. Each ends a run as an `error` frame, whose code is
// lower-cased (src/runs/loop.ts errorFrame): BAD_FRAME is `bad_frame` on the wire (interface document:
// run protocol).

export const RUN_ERRORS = {
  BAD_FRAME: { status: 400, message: 'the frame is not a well-formed run frame' },
  UNKNOWN_AGENT: { status: 400, message: 'no agent of that name (see GET /v1/agents)' },
  ALREADY_AUTHENTICATED: { status: 400, message: 'this socket is already authenticated' },
  UNKNOWN_TOOL_CALL: { status: 400, message: 'no tool call of that id is waiting for a result' },
  UNAUTHENTICATED: { status: 401, message: 'the first frame must be {type: "auth", token}' },
  TOOL_TIMEOUT: { status: 408, message: 'the client sent no tool_result in time' },
  RUN_IN_PROGRESS: { status: 409, message: 'one run at a time per socket' },
  NO_RUN: { status: 409, message: 'no run is in progress' },
  TOO_MANY_SOCKETS: { status: 429, message: 'this organization or user has too many run sockets open' },
} as const satisfies ErrorCatalogue;
