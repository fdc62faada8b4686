import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Auth } from '../auth/principal.js';
import { AppError } from '../http/errors.js';

// Pages that need a session (CONTRACT §4): "A signed-out visitor of a page that needs a session is sent
// to /account/login?return_to=… and back after signing in." The session is the __Host-svc_session cookie
// only; a page never takes a bearer (a browser does not send one).

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

export interface PageSessionOptions {
  /** Pages an unverified account may still see (the dashboard: it offers the resend). */
  allowUnverified?: boolean;
}

/**
 * Sets req.principal to the cookie session, or answers 303 to the sign-in page with return_to. A signed-in
 * but unverified account is sent to the dashboard, which says what to do (unless allowUnverified).
 */
export function requirePageSession(auth: Auth, options: PageSessionOptions = {}): RequestHandler {
  return async (req: Request, res: Response, next: NextFunction) => {
    let principal = req.principal ?? null;
    if (!principal) {
      try {
        principal = await auth.resolve(req);
      } catch (err) {
        // A stale or foreign bearer is the same as no session for a page; 503 (fail closed) stays an error.
        if (!(err instanceof AppError) || err.status !== 401) throw err;
      }
    }
    if (!principal || principal.kind !== 'session') {
      // Back to the same URL, query included, as a GET: for a form that posts to its own URL (the
      // consent page) the query is the request being answered; the form is shown again, not re-posted.
      res.redirect(303, loginUrlFor(req.originalUrl));
      return;
    }
    if (!principal.emailVerified && !options.allowUnverified) {
      res.redirect(303, '/account?notice=verify');
      return;
    }
    req.principal = principal;
    next();
  };
}

/**
 * Sets req.principal when the cookie carries a live session, so public pages can show who is signed
 * in; never refuses. A database that cannot answer is treated as signed out here (the page itself
 * still works) — pages that need the session use requirePageSession, which fails closed.
 */
export function attachPageSession(auth: Auth): RequestHandler {
  return async (req: Request, _res: Response, next: NextFunction) => {
    if (!req.principal) {
      const principal = await auth.resolve(req).catch(() => null);
      if (principal?.kind === 'session') req.principal = principal;
    }
    next();
  };
}
