// One error type for the whole service (STYLE: Errors). Handlers throw; the error middleware renders
// it in the shape of the surface the request arrived on.

export interface FieldError {
  path: string;
  message: string;
}

export class AppError extends Error {
  readonly expose: boolean;
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly extra: {
      errors?: FieldError[];
      headers?: Record<string, string>;
      /** Extra top-level fields merged into `detail` (or the OpenAI error object). */
      fields?: Record<string, unknown>;
      /** OpenAI error `param`. */
      param?: string;
    } = {},
  ) {
    super(message);
    this.name = 'AppError';
    this.expose = status < 500;
  }
}

export const badRequest = (code: string, message: string, fields?: Record<string, unknown>) =>
  new AppError(400, code, message, fields ? { fields } : {});
export const notFound = (message = 'not found') => new AppError(404, 'NOT_FOUND', message);
export const noAccess = (message = 'no access to this resource') => new AppError(403, 'NO_ACCESS', message);
export const forbidden = (code: string, message: string) => new AppError(403, code, message);
export const conflict = (code: string, message: string) => new AppError(409, code, message);

/** 401 for unknown, revoked or removed credentials (interface document: Errors; CONTRACT §3). */
export const invalidToken = () =>
  new AppError(401, 'INVALID_TOKEN', 'invalid token', { headers: { 'WWW-Authenticate': 'Bearer' } });

/** The Retry-After of every 503 that does not say otherwise: an outage is waited out in seconds. */
export const UNAVAILABLE_RETRY_AFTER_SECONDS = 5;

/** Membership could not be established: fail closed (interface document: Authentication 5). */
export const membershipUnavailable = () =>
  new AppError(503, 'MEMBERSHIP_UNAVAILABLE', 'membership cannot be established; try again', {
    headers: { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS) },
  });

/**
 * The database does not answer (it is down, unreachable or the pool has ended): a server state, not a
 * fault of the request, so 503 with Retry-After, like /readyz (CONTRACT §1), never a 500.
 */
export const databaseUnavailable = () =>
  new AppError(503, 'DATABASE_UNAVAILABLE', 'the service cannot reach its database right now; try again', {
    headers: { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS) },
  });

export const rateLimited = (retryAfterSeconds: number) =>
  new AppError(429, 'RATE_LIMITED', 'too many attempts; try again later', {
    headers: { 'Retry-After': String(Math.max(1, Math.ceil(retryAfterSeconds))) },
  });

/** A credential whose scopes do not cover the route (CONTRACT §6 "Credential options"): 403 insufficient_scope. */
export const insufficientScope = (scope: string) =>
  new AppError(403, 'insufficient_scope', `this credential's scopes do not include '${scope}'`, {
    headers: { 'WWW-Authenticate': `Bearer error="insufficient_scope", scope="${scope}"` },
  });
