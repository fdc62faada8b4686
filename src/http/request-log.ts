import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../log.js';
import type { Config } from '../config.js';
import { clientAddress } from './client-address.js';
import { recordRequest } from '../metrics/http.js';

// Request ids (x-request-id in and out) and one log line per request: id, method, path (never the query
// string: it can carry tokens, e.g. verification and share links), the client's address (as rate limits
// key it: behind TRUST_PROXY, the right-most untrusted X-Forwarded-For), status and duration. Written by hand
// rather than with pino-http, which built a child logger (serialising the request into its bindings)
// for every request, a cost on every model call even when the line is not written (bench/proxy.ts).

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

declare module 'http' {
  interface IncomingMessage {
    /** The request id: the caller's x-request-id when well formed, else a fresh UUID. */
    id: string;
  }
}

/** Express middleware, and the chat call's own entry (src/models/entry.ts) calls it on plain node objects. */
export function requestLogger(log: Logger, config: Pick<Config, 'trustProxy'>) {
  return (req: IncomingMessage & { originalUrl?: string }, res: ServerResponse, next: () => void) => {
    const incoming = req.headers['x-request-id'];
    const id = typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
    req.id = id;
    res.setHeader('x-request-id', id);
    const start = Date.now();
    // 'finish': the response was handed to the socket; 'close' alone: the client left before that.
    const done = () => {
      res.off('finish', done);
      res.off('close', done);
      recordRequest(req, res.statusCode, Date.now() - start);
      const failed = res.statusCode >= 500;
      if (!log.isLevelEnabled(failed ? 'error' : 'info')) return;
      const line = {
        req: {
          id,
          method: req.method,
          path: (req.originalUrl ?? req.url ?? '').split('?')[0],
          remoteAddress: clientAddress(req, config),
        },
        res: { status: res.statusCode },
        responseTime: Date.now() - start,
        ...(res.writableFinished ? {} : { aborted: true }),
      };
      if (failed) log.error(line, 'request errored');
      else log.info(line, 'request completed');
    };
    res.on('finish', done);
    res.on('close', done);
    next();
  };
}
