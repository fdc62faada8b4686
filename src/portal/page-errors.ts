import type { ErrorRequestHandler } from 'express';
import { html } from './html.js';
import { applyErrorHeaders, errorStatus, errorText, show } from './components.js';
import type { Logger } from '../log.js';
import { AppError } from '../http/errors.js';

// Errors a page did not handle inline: an HTML page in the layout, never JSON and never a stack trace
// (STYLE: a 500 says "internal error" and a request id; the log has the rest).

export function pageErrorHandler(log: Logger): ErrorRequestHandler {
  return (err, req, res, next) => {
    if (res.headersSent) return next(err);
    const known = err instanceof AppError || (typeof err?.status === 'number' && err.status < 500);
    if (!known) log.error({ err, reqId: req.id }, 'page error');
    const status = err instanceof AppError ? errorStatus(err) : known ? err.status : 500;
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
