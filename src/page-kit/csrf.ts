import { randomBytes } from 'node:crypto';
import type { Request, Response } from 'express';
import { parse as parseCookie } from 'cookie';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { constantTimeEqual } from '../crypto/hash.js';
import { html, type SafeHtml } from './template.js';

// Form CSRF for the pages (CONTRACT §4: "each [form] with a hidden CSRF field"). Double-submit: a random
// token lives in a `__Host-` cookie and is repeated in a hidden field; a cross-site page can neither
// read the cookie nor set it (the `__Host-` prefix forbids Domain attributes, so no sibling host can
// plant one), so it cannot produce a matching pair. It needs no session, which the sign-in and
// registration forms have not got yet (login CSRF), and no server state, so any process answers.
// On top, a browser's own Origin / Sec-Fetch-Site saying "another site" is refused outright.

export const CSRF_COOKIE = '__Host-svc_csrf';
export const CSRF_FIELD = 'csrf_token';

const TOKEN_SHAPE = /^[A-Za-z0-9_-]{43}$/;
/** The cookie outlives a session (12 h) so a form left open over a day still posts. */
const CSRF_COOKIE_MAX_AGE_MS = 24 * 60 * 60 * 1000;

function cookieToken(req: Request): string | undefined {
  const header = req.get('cookie');
  if (!header) return undefined;
  const value = parseCookie(header)[CSRF_COOKIE];
  return value && TOKEN_SHAPE.test(value) ? value : undefined;
}

/**
 * The token to embed in this response's forms. Reuses the browser's cookie when it has one (so several
 * open tabs keep working), else mints one and sets the cookie.
 */
export function csrfToken(req: Request, res: Response): string {
  const existing = (res.locals.csrfToken as string | undefined) ?? cookieToken(req);
  if (existing) {
    res.locals.csrfToken = existing;
    return existing;
  }
  return issueCsrfToken(res);
}

function issueCsrfToken(res: Response): string {
  const token = randomBytes(32).toString('base64url');
  res.cookie(CSRF_COOKIE, token, {
    httpOnly: true,
    secure: true,
    sameSite: 'lax',
    path: '/',
    maxAge: CSRF_COOKIE_MAX_AGE_MS,
  });
  res.locals.csrfToken = token;
  return token;
}

/**
 * A fresh token when the signed-in state changes (sign-in, sign-out), so a token seen before — on a
 * shared computer, say — is worth nothing afterwards (OWASP CSRF cheat sheet: rotate on login).
 */
export function rotateCsrfToken(res: Response): void {
  issueCsrfToken(res);
}

/** The hidden input for a form (use inside an `html` template). */
export function csrfField(req: Request, res: Response): SafeHtml {
  return html`<input type="hidden" name="${CSRF_FIELD}" value="${csrfToken(req, res)}">`;
}

function crossSite(req: Request): boolean {
  // Sec-Fetch-Site is set by the browser itself (a forbidden header): when present it decides.
  const site = req.get('sec-fetch-site');
  if (site) return site !== 'same-origin' && site !== 'none';
  // Older browsers: the Origin header. Our pages send Referrer-Policy: no-referrer, under which a
  // browser's form POST carries `Origin: null` (Fetch §3.1); that says nothing, so the token decides.
  const origin = req.get('origin');
  if (!origin || origin === 'null') return false;
  try {
    // req.host honours X-Forwarded-Host only from a TRUST_PROXY peer, as requestHost does (src/http/origin.ts).
    return new URL(origin).host.toLowerCase() !== req.host.toLowerCase();
  } catch {
    return true;
  }
}

/** Throws 403 CSRF unless the form's hidden field matches the cookie and the browser says same-origin. */
export function verifyCsrfField(req: Request): void {
  const field = (req.body as Record<string, unknown> | undefined)?.[CSRF_FIELD];
  const cookie = cookieToken(req);
  if (typeof field !== 'string' || !cookie || !constantTimeEqual(field, cookie) || crossSite(req)) {
    throw errorOf(
      COMMON_ERRORS,
      'CSRF',
      'this form has expired or came from another site; reload the page and try again',
    );
  }
}
