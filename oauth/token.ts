import type { IncomingMessage, ServerResponse } from 'node:http';
import OAuth2Server from '@node-oauth/oauth2-server';
import type { Deps } from '../src/deps.js';
import { requestOrigin } from '../src/http/origin.js';
import { SYSTEM_ORIGIN } from '../src/audit/context.js';
import { sendJson } from '../src/http/error-middleware.js';
import { ACCESS_TOKEN_TTL_SECONDS, REFRESH_TOKEN_TTL_SECONDS } from './grants.js';
import { DEVICE_CODE_GRANT } from './metadata.js';
import { DeviceCodeGrantType } from './device-grant.js';
import { createTokenModel } from './token-model.js';
import { clientCredentials } from './client-auth.js';
import { OAuthProtocolError } from './params.js';
import { REFRESH_TOKEN_GRANT, refreshTokenGrant } from './refresh-grant.js';

// POST /oauth/token. The refresh grant is one handler of ours in the order of RFC 6749 §6
// (oauth/refresh-grant.ts); the authorization code and device grants run on @node-oauth/oauth2-server
// with a per-request model (oauth/token-model.ts), which checks the code, its redirect URI and PKCE
// (docs/decisions/0085-one-refresh-handler.md). The library's response is checked against an allow-list: with
// allowExtendedTokenAttributes every extra property of saveToken's result would reach the client
// (the library's own authorization-code object among them), so only `grants` is let through.
// The endpoint works on plain node objects: it is the route of the token request's row in the app's route
// table (oauth/token-entry.ts), which Express and the node-level entry both serve, with the same steps.

export const TOKEN_PATH = '/oauth/token';

const GRANT_TYPES = new Set(['authorization_code', REFRESH_TOKEN_GRANT, DEVICE_CODE_GRANT]);

/** RFC 6749 §3.2: the token request is form-encoded. */
const FORM = /^application\/x-www-form-urlencoded\s*(;|$)/i;

const RESPONSE_FIELDS = new Set([
  'access_token',
  'token_type',
  'expires_in',
  'refresh_token',
  'scope',
  'grants',
]);

/** The request as the endpoint reads it: headers and socket (the origin), the parsed form, the query. */
export type TokenHttpRequest = IncomingMessage & { body?: unknown; query?: unknown };

function sendOAuthError(res: ServerResponse, status: number, error: string, description: string) {
  if (error === 'invalid_client') {
    // RFC 6749 §5.2: 401 with a challenge for the scheme the client can use.
    status = 401;
    res.setHeader('WWW-Authenticate', 'Basic realm="svc", charset="UTF-8"');
  }
  sendJson(res, status, { error, error_description: description });
}

/** The endpoint; it answers, or throws for the caller's error handling (the `oauth` surface). */
export function tokenEndpoint(deps: Deps) {
  return async (req: TokenHttpRequest, res: ServerResponse): Promise<void> => {
    res.setHeader('Cache-Control', 'no-store');
    res.setHeader('Pragma', 'no-cache');
    const issuer = requestOrigin(req, deps.config);
    const body = { ...((req.body ?? {}) as Record<string, unknown>) };
    if (!FORM.test(req.headers['content-type'] ?? ''))
      throw new OAuthProtocolError(
        'invalid_request',
        'the token request must be application/x-www-form-urlencoded',
      );
    // The grant type is checked first: RFC 6749 §5.2 answers an unknown grant unsupported_grant_type,
    // whatever its client credentials.
    if (typeof body.grant_type !== 'string') {
      throw new OAuthProtocolError('invalid_request', 'grant_type is required (sent once)');
    }
    if (!GRANT_TYPES.has(body.grant_type)) {
      throw new OAuthProtocolError(
        'unsupported_grant_type',
        `grant_type ${body.grant_type.slice(0, 100)} is not supported`,
      );
    }
    // Basic credentials are form-decoded (RFC 6749 §2.3.1 requires it; strict clients such as
    // oauth4webapi encode every '-' and '_'; the library does not) and handed on as body credentials.
    // Two methods at once is a malformed request (RFC 6749 §2.3).
    const creds = clientCredentials(req);
    if (creds.basic) {
      if (body.client_secret !== undefined)
        throw new OAuthProtocolError('invalid_request', 'use one client authentication method');
      if (body.client_id !== undefined && body.client_id !== creds.clientId)
        throw new OAuthProtocolError('invalid_client', 'client_id does not match');
      body.client_id = creds.clientId;
      body.client_secret = creds.secret;
    }
    // The token request is the client's, not the person's: a grant it revokes (a replayed code, a reused
    // refresh token) svc revokes itself, and a grant it issues names the person who approved it as the
    // actor (src/audit/grants.ts). Its audit events carry no address or user agent of the request.
    const auditOrigin = SYSTEM_ORIGIN;
    if (body.grant_type === REFRESH_TOKEN_GRANT) {
      sendJson(res, 200, await refreshTokenGrant(deps, { issuer, form: body, auditOrigin }));
      return;
    }
    // The library's own Request, without the Authorization header (its credentials are in the body now).
    const { authorization: _credentials, ...libraryHeaders } = req.headers;
    const request = new OAuth2Server.Request({
      headers: libraryHeaders as Record<string, string>,
      method: req.method ?? 'POST',
      query: (req.query ?? {}) as Record<string, string>,
      body,
    });
    const ctx = { deps, issuer, body, auditOrigin };
    const model = Object.assign(createTokenModel(ctx), { ctx });
    const server = new OAuth2Server({ model } as unknown as ConstructorParameters<typeof OAuth2Server>[0]);
    const response = new OAuth2Server.Response({ headers: {} });
    try {
      await server.token(request, response, {
        accessTokenLifetime: ACCESS_TOKEN_TTL_SECONDS,
        refreshTokenLifetime: REFRESH_TOKEN_TTL_SECONDS,
        allowExtendedTokenAttributes: true,
        alwaysIssueNewRefreshToken: true,
        // Public clients authenticate by client_id alone (+ PKCE for codes); confidential ones are
        // checked in the model's getClient whatever the grant.
        requireClientAuthentication: {
          authorization_code: false,
          [DEVICE_CODE_GRANT]: false,
        },
        extendedGrantTypes: { [DEVICE_CODE_GRANT]: DeviceCodeGrantType as never },
      });
    } catch (err) {
      if (err instanceof OAuth2Server.OAuthError && err.name !== 'server_error') {
        sendOAuthError(res, err.code ?? 400, err.name, err.message ?? '');
        return;
      }
      // A server_error wraps what really failed (a database error): let the error handling log it.
      throw (err as { inner?: unknown }).inner ?? err;
    }
    const out = Object.fromEntries(
      Object.entries(response.body as Record<string, unknown>).filter(([k]) => RESPONSE_FIELDS.has(k)),
    );
    sendJson(res, 200, out);
  };
}
