import type { Response } from 'express';
import { PAGE_CSS, styleHashSource } from './style.js';
import { html, raw, type SafeHtml } from './template.js';

// The shared layout of every server-rendered page (CONTRACT §4 "Pages"): the portal, the OAuth consent
// page and the dev checkout all render through renderPage and answer through sendPage, so they share
// one stylesheet, one escaping rule and one set of security headers.

export { SafeHtml, escapeHtml, raw, html } from './template.js';

export interface PageUser {
  email: string;
  name?: string | null;
}

export interface PageOptions {
  title: string;
  body: SafeHtml | string;
  /** The signed-in user, shown in the header with a link to the dashboard. */
  user?: PageUser | null;
  /** A narrow single-column layout (sign-in, registration, consent). */
  narrow?: boolean;
  /** The signed-in pages' navigation (./nav.ts), under the top bar. */
  nav?: SafeHtml;
}

/** A complete HTML document with the shared stylesheet; a string `body` is escaped as text. */
export function renderPage({ title, body, user, narrow, nav }: PageOptions): string {
  const who = user
    ? html`<span class="who">Signed in as <a href="/account">${user.name || user.email}</a></span>`
    : html`<span class="who"><a href="/account/login">Sign in</a></span>`;
  const doc = html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>${title} · svc</title>
<style>${raw(PAGE_CSS)}</style>
</head>
<body>
<a class="skip" href="#main">Skip to content</a>
<header class="top"><div class="bar"><a class="brand" href="/account">svc</a>${who}</div>${nav ?? ''}</header>
<main id="main" class="${narrow ? 'narrow' : ''}">
${body}
</main>
<footer>svc · accounts, credentials and model access · <a href="/docs">API reference</a></footer>
</body>
</html>`;
  return doc.value;
}

export interface SendPageOptions {
  /**
   * Extra `form-action` sources. Browsers apply form-action to the redirects that follow a form
   * submission (CSP3 §6.3.1), so a page whose form ends in a redirect to another origin (the consent
   * page answering to a client's redirect_uri) must list that origin here.
   */
  formAction?: string[];
}

/** The policy of every page: nothing but our own origin and our own stylesheet; never framed. */
export function pageCsp(options: SendPageOptions = {}): string {
  const formAction = ["'self'", ...(options.formAction ?? [])].join(' ');
  return [
    "default-src 'self'",
    `style-src ${styleHashSource()}`,
    "img-src 'self' data:",
    "script-src 'none'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
    `form-action ${formAction}`,
    "object-src 'none'",
  ].join('; ');
}

/** Sends a rendered page with the security headers (clickjacking, sniffing, referrer leaks, caching). */
export function sendPage(
  res: Response,
  page: string | SafeHtml,
  status = 200,
  options: SendPageOptions = {},
): void {
  res.status(status);
  res.set({
    'Content-Type': 'text/html; charset=utf-8',
    'Content-Security-Policy': pageCsp(options),
    'X-Frame-Options': 'DENY',
    'Referrer-Policy': 'no-referrer',
    'X-Content-Type-Options': 'nosniff',
    'Cache-Control': 'no-store',
  });
  res.send(typeof page === 'string' ? page : page.value);
}

export { csrfToken, csrfField, verifyCsrfField, rotateCsrfToken, CSRF_FIELD, CSRF_COOKIE } from './csrf.js';
export { safeReturnTo, loginUrlFor } from './return-to.js';
