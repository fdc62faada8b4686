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

/**
 * One code of a domain's error catalogue (STYLE: Errors; docs/decisions/0086-error-catalogues.md): the
 * status it answers with and what it means. Codes are UPPER_SNAKE; a code a standard or the contract
 * spells in lower case (an RFC 6749 error, CONTRACT §3's `payment_failed`) keeps that spelling and says
 * where it comes from in `spelledBy`.
 */
export interface ErrorEntry {
  readonly status: number;
  /** What the code means: the API document's text, and the message when a throw site adds nothing. */
  readonly message: string;
  readonly spelledBy?: string;
  /** A second status the code answers with where the contract gives it one (the throw site names it). */
  readonly alsoStatus?: number;
}

/** A domain's `errors.ts`: code → status, meaning. */
export type ErrorCatalogue = Readonly<Record<string, ErrorEntry>>;

/** The error for `code` of `catalogue`, with its status, and its meaning unless a message says more. */
export function errorOf<C extends ErrorCatalogue>(
  catalogue: C,
  code: keyof C & string,
  message?: string,
  extra?: ConstructorParameters<typeof AppError>[3],
): AppError {
  const entry = catalogue[code]!;
  return new AppError(entry.status, code, message ?? entry.message, extra);
}

/** As errorOf, with the entry's second status (`alsoStatus`): the throw site says which of the two. */
export function errorWithStatus<C extends ErrorCatalogue>(
  catalogue: C,
  code: keyof C & string,
  status: number,
  message?: string,
): AppError {
  const entry = catalogue[code]!;
  if (status !== entry.status && status !== entry.alsoStatus)
    throw new Error(`${code} does not answer with ${status}`);
  return new AppError(status, code, message ?? entry.message);
}

/** The codes every surface may answer with, whatever the domain (src/http/, src/auth/, src/db/outage.ts). */
export const COMMON_ERRORS = {
  BAD_REQUEST: { status: 400, message: 'bad request' },
  VALIDATION_ERROR: { status: 400, message: 'the input failed validation (detail.errors names each field)' },
  INVALID_TOKEN: { status: 401, message: 'invalid token' },
  CSRF: { status: 403, message: 'cross-site request refused' },
  EMAIL_NOT_VERIFIED: { status: 403, message: 'verify your e-mail address first' },
  NO_ACCESS: { status: 403, message: 'no access to this resource' },
  // One code for the membership guard's refusal wherever it answers: NOT_A_MEMBER on {detail}, MCP and
  // /v1/auth/verify, not_a_member on the model routes and run frames, which lower-case (CONTRACT §3).
  NOT_A_MEMBER: { status: 403, message: 'the user does not belong to this organization' },
  insufficient_scope: {
    status: 403,
    message: "the credential's scopes do not include the route's",
    spelledBy: 'CONTRACT §6',
  },
  NOT_FOUND: { status: 404, message: 'not found' },
  REQUEST_TIMEOUT: { status: 408, message: 'the request body did not arrive in time' },
  MISDIRECTED_REQUEST: {
    status: 421,
    message: 'a dev-mode server does not answer for this Host (DNS-rebinding guard)',
  },
  PAYLOAD_TOO_LARGE: { status: 413, message: 'request body too large' },
  UNSUPPORTED_ENCODING: { status: 415, message: 'unsupported content encoding' },
  RATE_LIMITED: { status: 429, message: 'too many attempts; try again later' },
  INTERNAL: { status: 500, message: 'internal error' },
  MEMBERSHIP_UNAVAILABLE: { status: 503, message: 'membership cannot be established; try again' },
  MAIL_UNAVAILABLE: { status: 503, message: 'the mail relay did not take the message; try again' },
  DATABASE_UNAVAILABLE: {
    status: 503,
    message: 'the service cannot reach its database right now; try again',
  },
} as const satisfies ErrorCatalogue;

export const badRequest = (code: string, message: string, fields?: Record<string, unknown>) =>
  new AppError(400, code, message, fields ? { fields } : {});
export const notFound = (message?: string) => errorOf(COMMON_ERRORS, 'NOT_FOUND', message);
export const noAccess = (message?: string) => errorOf(COMMON_ERRORS, 'NO_ACCESS', message);
export const forbidden = (code: string, message: string) => new AppError(403, code, message);
export const conflict = (code: string, message: string) => new AppError(409, code, message);

/** 401 for unknown, revoked or removed credentials (interface document: Errors; CONTRACT §3). */
export const invalidToken = () =>
  errorOf(COMMON_ERRORS, 'INVALID_TOKEN', undefined, { headers: { 'WWW-Authenticate': 'Bearer' } });

/** The Retry-After of every 503 that does not say otherwise: an outage is waited out in seconds. */
export const UNAVAILABLE_RETRY_AFTER_SECONDS = 5;

/** Membership could not be established: fail closed (interface document: Authentication 5). */
export const membershipUnavailable = () =>
  errorOf(COMMON_ERRORS, 'MEMBERSHIP_UNAVAILABLE', undefined, {
    headers: { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS) },
  });

/**
 * The database does not answer (it is down, unreachable or the pool has ended): a server state, not a
 * fault of the request, so 503 with Retry-After, like /readyz (CONTRACT §1), never a 500.
 */
export const databaseUnavailable = () =>
  errorOf(COMMON_ERRORS, 'DATABASE_UNAVAILABLE', undefined, {
    headers: { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS) },
  });

export const rateLimited = (retryAfterSeconds: number) =>
  errorOf(COMMON_ERRORS, 'RATE_LIMITED', undefined, {
    headers: { 'Retry-After': String(Math.max(1, Math.ceil(retryAfterSeconds))) },
  });

/** A credential whose scopes do not cover the route (CONTRACT §6 "Credential options"): 403 insufficient_scope. */
export const insufficientScope = (scope: string) =>
  errorOf(COMMON_ERRORS, 'insufficient_scope', `this credential's scopes do not include '${scope}'`, {
    headers: { 'WWW-Authenticate': `Bearer error="insufficient_scope", scope="${scope}"` },
  });
