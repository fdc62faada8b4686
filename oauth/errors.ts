import type { ErrorCatalogue } from '../src/http/errors.js';

// The authorization server's error codes (STYLE: Errors): code → status, meaning. The codes are the ones
// the OAuth RFCs register, spelled as they spell them; /oauth/* renders them as RFC 6749 §5.2
// {error, error_description} (src/http/error-middleware.ts). The resource servers' invalid_token (RFC 6750) is
// raised by oauth/verify.ts for the model routes and MCP, where the {detail} surface says INVALID_TOKEN
// (src/http/errors.ts: both are fixed from outside, CONTRACT §3). The OpenAPI document lists
// them per status (src/openapi/error-codes.ts).

export const OAUTH_ERRORS = {
  invalid_request: { status: 400, message: 'the request is malformed', spelledBy: 'RFC 6749 §5.2' },
  invalid_client: {
    status: 401,
    message: 'client authentication failed (WWW-Authenticate: Basic)',
    spelledBy: 'RFC 6749 §5.2',
  },
  invalid_grant: {
    status: 400,
    message: 'the code, device code or refresh token is invalid, expired, used or not this client’s',
    spelledBy: 'RFC 6749 §5.2',
  },
  unauthorized_client: {
    status: 400,
    message: 'the client may not use this grant',
    spelledBy: 'RFC 6749 §5.2',
  },
  unsupported_grant_type: {
    status: 400,
    message: 'the grant type is not supported',
    spelledBy: 'RFC 6749 §5.2',
  },
  invalid_scope: {
    status: 400,
    message: 'the scope is malformed, unknown or beyond what was granted',
    spelledBy: 'RFC 6749 §5.2',
  },
  invalid_target: {
    status: 400,
    message: 'the resource is not served here or not approved for this grant',
    spelledBy: 'RFC 8707 §2',
  },
  access_denied: { status: 400, message: 'the person denied the request', spelledBy: 'RFC 8628 §3.5' },
  authorization_pending: {
    status: 400,
    message: 'the person has not approved the code yet',
    spelledBy: 'RFC 8628 §3.5',
  },
  slow_down: {
    status: 400,
    message: 'polling too fast; wait longer between polls',
    spelledBy: 'RFC 8628 §3.5',
  },
  expired_token: {
    status: 400,
    message: 'the device code has expired or was already used',
    spelledBy: 'RFC 8628 §3.5',
  },
  invalid_client_metadata: {
    status: 400,
    message: 'a registration field is invalid or not supported',
    spelledBy: 'RFC 7591 §3.2.2',
  },
  invalid_redirect_uri: {
    status: 400,
    message: 'a redirect URI is not allowed',
    spelledBy: 'RFC 7591 §3.2.2',
  },
  temporarily_unavailable: {
    status: 503,
    message: 'the client registry cannot be read; try again',
    spelledBy: 'RFC 6749 §4.1.2.1',
  },
  invalid_token: {
    status: 401,
    message: 'the access token is missing, invalid, expired, revoked or for another resource',
    spelledBy: 'RFC 6750 §3.1',
  },
} as const satisfies ErrorCatalogue;

export type OAuthErrorCode = keyof typeof OAUTH_ERRORS;
