import type { ErrorCatalogue } from '../http/errors.js';

// The model routes' error codes (STYLE: Errors; decision records 0086 and 0120): the chat, Responses and
// Messages calls, the catalog, stored responses and the provider behind them, beside the common ones
// (src/http/errors.ts: NOT_A_MEMBER, NO_ACCESS, NOT_FOUND, VALIDATION_ERROR…) and the rate limits'
// (src/ratelimit/errors.ts). The model routes and run frames lower-case every code (the OpenAI error
// object), so UPSTREAM_ERROR is upstream_error on the wire; the two CONTRACT spells keep its spelling.
// `insufficient_credits` is the spend's (src/billing/spend.ts raises it too).

export const MODEL_ERRORS = {
  UNSUPPORTED_PARAMETER: { status: 400, message: 'a parameter this server does not pass on to the model' },
  UNSUPPORTED_CONTENT: { status: 400, message: "a content part of a type the server's model does not take" },
  INVALID_REQUEST_ERROR: {
    status: 400,
    message: 'response_format.json_schema cannot be answered (unreadable, or asks for too much)',
  },
  PREVIOUS_RESPONSE_NOT_FOUND: {
    status: 400,
    message: 'previous_response_id names no stored response of the acting organization',
  },
  ITEM_NOT_FOUND: { status: 400, message: 'an item_reference names no stored output item' },
  UPSTREAM_REJECTED: {
    status: 400,
    message:
      "the model provider rejected the request (the provider's own code when it is a plain identifier)",
  },
  ORG_MISMATCH: {
    status: 403,
    message: 'x-svc-organisation or org_id names an organization this credential may not act for',
  },
  viewer_cannot_spend: {
    status: 403,
    message: "a viewer cannot use the organization's budget",
    spelledBy: 'CONTRACT §7',
  },
  MODEL_NOT_FOUND: { status: 404, message: 'the model does not exist' },
  UPGRADE_REQUIRED: {
    status: 426,
    message: 'the run path speaks WebSocket: connect with Upgrade: websocket',
  },
  concurrency_limit: {
    status: 429,
    message: 'too many model calls or runs in flight for this organization; Retry-After says when',
    spelledBy: 'CONTRACT §3',
  },
  UPSTREAM_RATE_LIMITED: { status: 429, message: 'the model provider is busy; try again shortly' },
  CLIENT_CLOSED_REQUEST: { status: 499, message: 'the client closed the connection' },
  UPSTREAM_ERROR: { status: 502, message: 'the model provider failed to answer, or answered malformed' },
  UPSTREAM_UNAVAILABLE: { status: 502, message: 'the model provider could not be reached' },
  CONCURRENCY_UNAVAILABLE: { status: 503, message: 'the concurrency limiter cannot be reached; try again' },
  UPSTREAM_TIMEOUT: { status: 504, message: 'the model provider did not answer in time' },
} as const satisfies ErrorCatalogue;
