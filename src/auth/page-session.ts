import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Auth } from './principal.js';
import { AppError } from '../http/errors.js';
import { loginUrlFor } from '../page-kit/return-to.js';

// Pages that need a session (CONTRACT §4): "A signed-out visitor of a page that needs a session is sent
// to /account/login?return_to=… and back after signing in." The session is the __Host-svc_session cookie
// only; a page never takes a bearer (a browser does not send one).

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
