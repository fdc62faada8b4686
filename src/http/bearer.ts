// The credential of an `Authorization: Bearer <credential>` header (RFC 6750 §2.1; the scheme is
// case-insensitive, RFC 9110 §11.1), for every route that takes a bearer: the account routes, the model
// routes, MCP, /metrics. What a route does without one (401, or another way in) is the route's to say.

const BEARER = /^Bearer\s+(\S+)\s*$/i;

/** The bearer credential, or null when the header is absent or not a single bearer credential. */
export function bearerOf(header: string | undefined | null): string | null {
  if (!header) return null;
  return BEARER.exec(header)?.[1] ?? null;
}
