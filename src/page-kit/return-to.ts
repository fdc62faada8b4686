// Where a page may send a browser back to after signing in (CONTRACT §4: "A signed-out visitor of a page
// that needs a session is sent to /account/login?return_to=… and back after signing in"): a path on this
// origin, never anywhere else. The guard that sends the visitor there is src/auth/page-session.ts.

const PROBE_ORIGIN = 'http://return-to.invalid';

/**
 * A same-origin relative path (path, query, fragment) or null. Anything that could leave the origin is
 * refused — absolute URLs, scheme-relative `//host`, `/\host` (browsers read a backslash as a slash),
 * control characters — so return_to can never be an open redirect (RFC 9700 §4.11).
 *
 * The check applies to what is returned, not only to what came in: URL normalisation resolves dot
 * segments, so `/.//evil.example`, `/a/..//evil.example` and `/%2e//evil.example` all become
 * `//evil.example`, a scheme-relative URL to another host. A result that starts with
 * two slashes, or that would normalise to something else again, is refused.
 */
export function safeReturnTo(value: unknown): string | null {
  if (typeof value !== 'string' || value.length === 0 || value.length > 2048) return null;
  const path = sameOriginPath(value);
  if (path === null || sameOriginPath(path) !== path) return null;
  // Back to the sign-in page would only loop.
  const { pathname } = new URL(path, PROBE_ORIGIN);
  if (pathname === '/account/login' || pathname.startsWith('/account/login/')) return null;
  return path;
}

/** `value` normalised (path, query, fragment) when it is a path on this origin that stays one; else null. */
function sameOriginPath(value: string): string | null {
  // eslint-disable-next-line no-control-regex -- control characters are what this refuses
  if (!value.startsWith('/') || value.startsWith('//') || /[\\\u0000-\u001f\u007f]/.test(value)) return null;
  let url: URL;
  try {
    url = new URL(value, PROBE_ORIGIN);
  } catch {
    return null;
  }
  if (url.origin !== PROBE_ORIGIN) return null;
  const path = url.pathname + url.search + url.hash;
  return path.startsWith('//') ? null : path;
}

/** The sign-in page that returns to `path` afterwards (when `path` is a safe return target). */
export function loginUrlFor(path: string | null | undefined): string {
  const target = safeReturnTo(path);
  return target && target !== '/account'
    ? `/account/login?return_to=${encodeURIComponent(target)}`
    : '/account/login';
}
