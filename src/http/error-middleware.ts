import type { IncomingMessage, ServerResponse } from 'node:http';
import type { ErrorRequestHandler, Request, RequestHandler } from 'express';
import { AppError, UNAVAILABLE_RETRY_AFTER_SECONDS, errorOf, COMMON_ERRORS } from './errors.js';
import type { Logger } from '../log.js';

// Renders every error in the shape of its surface (STYLE: Errors):
//   /v1 account, billing, project routes  {detail: {code, message, …}}
//   model routes                          OpenAI {error: {message, type, code, param}}
//   /v1/messages (Anthropic Messages API) {type: "error", error: {type, message}}
//   /oauth/*                              RFC 6749 {error, error_description}
// A 500 says "internal error" and the request id; the log has the rest.

export type Surface = 'detail' | 'openai' | 'anthropic' | 'oauth';

// Model routes, and the OpenAI API's other model paths svc does not serve (an unknown one is a 404 an
// OpenAI client can read).
const OPENAI_PATHS = [
  /^\/v1\/chat\//,
  /^\/v1\/models(\/|$)/,
  /^\/v1\/agents(\/|$)/,
  /^\/v1\/runs(\/|$)/,
  /^\/v1\/(responses|completions|embeddings|moderations|audio|images)(\/|$)/,
];

export function surfaceOf(req: Request): Surface {
  return surfaceOfPath(req.path);
}

/** The surface of a request path (without its query), for answers given outside Express. */
export function surfaceOfPath(path: string): Surface {
  if (path.startsWith('/oauth/')) return 'oauth';
  if (/^\/v1\/messages(\/|$)/.test(path)) return 'anthropic';
  if (OPENAI_PATHS.some((re) => re.test(path))) return 'openai';
  return 'detail';
}

const OPENAI_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'insufficient_quota',
  403: 'permission_error',
  404: 'not_found_error',
  409: 'conflict_error',
  413: 'invalid_request_error',
  429: 'rate_limit_error',
  503: 'service_unavailable',
};

/** Anthropic's error types by status (its API reference, "Errors"); a 5xx of ours is `api_error`. */
const ANTHROPIC_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  503: 'overloaded_error',
};

/** Body-parser and other http-errors carry a status and a type; map the client ones to AppError. */
function normalise(err: unknown): AppError | null {
  if (err instanceof AppError) return err;
  const e = err as { status?: number; statusCode?: number; type?: string; expose?: boolean };
  const status = e?.status ?? e?.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    // A body that does not parse fails validation as a whole (CONTRACT §3: 400 VALIDATION_ERROR with
    // detail.errors), its path the root, as src/http/validate.ts names it.
    if (e.type === 'entity.parse.failed') {
      const message = 'request body is not valid JSON';
      return errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', `(root): ${message}`, {
        errors: [{ path: '(root)', message }],
      });
    }
    if (e.type === 'entity.too.large')
      return errorOf(COMMON_ERRORS, 'PAYLOAD_TOO_LARGE', 'request body too large');
    if (e.type === 'encoding.unsupported' || e.type === 'charset.unsupported')
      return errorOf(COMMON_ERRORS, 'UNSUPPORTED_ENCODING', 'unsupported content encoding');
    // error-catalogue: COMMON_ERRORS' BAD_REQUEST, with the 4xx the parser's error carries.
    return new AppError(status, 'BAD_REQUEST', 'bad request');
  }
  return null;
}

/** Our generic codes (body unreadable, validation, NUL) say what RFC 6749 §5.2 calls invalid_request. */
const OAUTH_INVALID_REQUEST = new Set([
  'BAD_REQUEST',
  'VALIDATION_ERROR',
  'PAYLOAD_TOO_LARGE',
  'UNSUPPORTED_ENCODING',
  'REQUEST_TIMEOUT',
]);

/**
 * The RFC 6749 `error` for an AppError on /oauth/*: protocol errors keep their registered code; a
 * server fault is `server_error` and a state to wait out (503: the database or a store cannot answer)
 * `temporarily_unavailable` (RFC 6749 §4.1.2.1), never our internal code.
 */
function oauthErrorCode(err: AppError): string {
  if (err.status === 500) return 'server_error';
  if (err.status === 503) return 'temporarily_unavailable';
  if (OAUTH_INVALID_REQUEST.has(err.code)) return 'invalid_request';
  return err.code.toLowerCase();
}

export function renderError(err: AppError, surface: Surface): unknown {
  if (surface === 'oauth') {
    return { error: oauthErrorCode(err), error_description: err.message };
  }
  if (surface === 'anthropic') {
    const type = ANTHROPIC_TYPES[err.status] ?? (err.status >= 500 ? 'api_error' : 'invalid_request_error');
    return { type: 'error', error: { type, message: err.message } };
  }
  if (surface === 'openai') {
    return {
      error: {
        message: err.message,
        type: OPENAI_TYPES[err.status] ?? (err.status >= 500 ? 'server_error' : 'invalid_request_error'),
        code: err.code.toLowerCase(),
        param: err.extra.param ?? null,
        ...err.extra.fields,
      },
    };
  }
  return {
    detail: {
      code: err.code,
      message: err.message,
      ...(err.extra.errors ? { errors: err.extra.errors } : {}),
      ...err.extra.fields,
    },
  };
}

export function errorMiddleware(log: Logger): ErrorRequestHandler {
  return (err, req, res, _next) => sendError(log, err, req, res, surfaceOf(req));
}

/**
 * Answers `err` in the surface's shape: the error middleware's work, on plain node objects so that the
 * chat call's own entry (src/models/entry.ts) answers exactly as Express would.
 */
export function sendError(
  log: Logger,
  err: unknown,
  req: IncomingMessage,
  res: ServerResponse,
  surface: Surface,
): void {
  let appErr = normalise(err);
  if (!appErr) {
    log.error({ err, reqId: req.id }, 'unhandled error');
    appErr = errorOf(COMMON_ERRORS, 'INTERNAL', `internal error (request ${String(req.id)})`);
  }
  if (res.headersSent) {
    res.destroy();
    return;
  }
  for (const [k, v] of Object.entries(appErr.extra.headers ?? {})) res.setHeader(k, v);
  // Every 503 is a state to wait out, and says how long.
  if (appErr.status === 503 && !res.hasHeader('retry-after'))
    res.setHeader('Retry-After', String(UNAVAILABLE_RETRY_AFTER_SECONDS));
  sendJson(res, appErr.status, renderError(appErr, surface));
}

/** A JSON answer as Express's res.json writes it (its content type, a length), on a plain response. */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('content-type', 'application/json; charset=utf-8');
  res.setHeader('content-length', Buffer.byteLength(text));
  res.end(text);
}

/** Unknown route: 404 NOT_FOUND in the surface's shape (CONTRACT §3). */
export const notFoundHandler: RequestHandler = (_req, _res, next) => {
  next(errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such route'));
};
