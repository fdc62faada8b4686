import type { ErrorRequestHandler } from 'express';
import { html } from '../page-kit/html.js';
import { applyErrorHeaders, errorStatus, errorText, show } from './components.js';
import type { Logger } from '../log.js';
import { AppError } from '../http/errors.js';

// Errors a page did not handle inline: an HTML page in the layout, never JSON and never a stack trace
// (STYLE: a 500 says "internal error" and a request id; the log has the rest).

export function pageErrorHandler(log: Logger): ErrorRequestHandler {
  return (err: unknown, req, res, next) => {
    if (res.headersSent) return next(err);
    // Besides AppErrors, a 4xx status set by body-parser (a body too large, a form that does not parse).
    const parserStatus = (err as { status?: unknown } | null)?.status;
    const clientStatus = typeof parserStatus === 'number' && parserStatus < 500 ? parserStatus : null;
    const known = err instanceof AppError || clientStatus !== null;
    if (!known) log.error({ err, reqId: req.id }, 'page error');
    const status = err instanceof AppError ? errorStatus(err) : (clientStatus ?? 500);
    applyErrorHeaders(res, err);
    const text = known && !(err instanceof AppError) ? 'The request could not be read.' : errorText(err);
    show(req, res, {
      title: status === 429 ? 'Slow down' : 'Something went wrong',
      status,
      narrow: true,
      body: html`<div class="card"><h1>${status === 429 ? 'Slow down' : 'Something went wrong'}</h1>
<div class="alert error" role="alert">${text}</div>
${status >= 500 ? html`<p class="muted">Reference: <code>${String(req.id ?? '')}</code></p>` : ''}
<p><a href="/account">Back to your account</a></p></div>`,
    });
  };
}

/**
 * A browser's request that no surface answered, or whose error no page handler took (an unknown page, a
 * bad dev checkout): an HTML error page when the request asks for HTML before JSON (a browser's
 * navigation does; curl, SDKs and fetch without an Accept header do not), else the JSON envelope as
 * before. Only GET and HEAD: a form post to an API route keeps its JSON answer.
 */
export function browserErrorPage(log: Logger): ErrorRequestHandler {
  const page = pageErrorHandler(log);
  return (err, req, res, next) => {
    const wantsHtml =
      (req.method === 'GET' || req.method === 'HEAD') &&
      req.accepts(['application/json', 'text/html']) === 'text/html' &&
      !req.path.startsWith('/v1/') &&
      !req.path.startsWith('/mcp');
    if (!wantsHtml) return next(err);
    if (err instanceof AppError && err.status === 404) {
      if (res.headersSent) return next(err);
      return show(req, res, {
        title: 'Not found',
        status: 404,
        narrow: true,
        body: html`<div class="card"><h1>Not found</h1><p>There is no such page.</p><p><a href="/account">Go to your account</a></p></div>`,
      });
    }
    page(err, req, res, next);
  };
}
