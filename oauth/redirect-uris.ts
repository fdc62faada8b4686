// Which redirect URIs a client may register (RFC 8252, RFC 9700 §4.1): https; http only to a loopback
// address (a native app's local listener, RFC 8252 §7.3); a private-use scheme shaped like a reverse
// domain name (RFC 8252 §7.1). No fragment, no credentials; javascript:, data:, file: and the like never.
// One rule for every client that names its own redirect URIs: dynamic registration (oauth/register.ts)
// and client ID metadata documents (oauth/client-metadata.ts), as CONTRACT §7 asks.

const LOOPBACK = new Set(['127.0.0.1', '[::1]', 'localhost']);

/** Why `uri` may not be a redirect URI, or null when it may. */
export function redirectUriProblem(uri: string): string | null {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    return 'is not an absolute URI';
  }
  if (url.hash) return 'must not contain a fragment';
  if (url.username || url.password) return 'must not contain credentials';
  if (url.protocol === 'https:') return null;
  if (url.protocol === 'http:')
    return LOOPBACK.has(url.hostname) ? null : 'must use https unless it is a loopback address';
  if (/^[a-z][a-z0-9+.-]*\.[a-z0-9+.-]+:$/.test(url.protocol)) return null;
  return 'uses a scheme that is not allowed';
}
