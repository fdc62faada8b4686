import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { AppError } from './errors.js';
import { renderError, sendJson, surfaceOfPath } from './error-middleware.js';

// A request body that stops arriving (issue 22 item 4). The server's requestTimeout is 0 because a
// streamed answer may run for minutes; without another bound, 300 connections trickling a body one byte
// every 5 s were all still open after 45 s. While a request's body is being received its socket gets an
// idle timeout (REQUEST_BODY_IDLE_TIMEOUT_MS, docs/limits.md): no byte for that long and the request is
// answered 408 and its connection closed. Once the body has arrived (or for a request with none) the
// timeout is off again, so a streamed answer is never cut by it.

/** True when the request announces a body (RFC 9112 §6.3: Content-Length > 0 or Transfer-Encoding). */
const announcesBody = (req: IncomingMessage): boolean =>
  req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;

export function limitBodyIdle(server: Server, idleMs: number): void {
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    if (idleMs <= 0 || !announcesBody(req)) return;
    const socket = req.socket;
    const stalled = () => {
      // Node's own handler for a socket timeout (destroy) runs only when no one listens; we answer first.
      if (!res.headersSent) {
        const err = new AppError(
          408,
          'REQUEST_TIMEOUT',
          `no part of the request body arrived for ${idleMs} ms`,
        );
        res.setHeader('connection', 'close');
        const path = (req.url ?? '/').split('?')[0]!;
        sendJson(res, 408, renderError(err, surfaceOfPath(path)));
      }
      socket.destroySoon();
    };
    // 'end': the whole body arrived. A request answered before that (a credential refused before the
    // body is read) still has the rest read and dropped by Node, under the same limit.
    req.once('end', () => {
      req.off('timeout', stalled);
      // Whatever timeout the server keeps between requests (keep-alive) it sets again itself.
      if (socket.timeout === idleMs) socket.setTimeout(0);
    });
    // Node gives a finished answer's socket the keep-alive timeout (65 s) even while it is still draining
    // the request's body: the body's limit is put back.
    res.once('finish', () => {
      if (!req.complete) socket.setTimeout(idleMs);
    });
    req.on('timeout', stalled);
    socket.setTimeout(idleMs);
  });
}
