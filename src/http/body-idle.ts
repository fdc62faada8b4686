import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { errorOf, COMMON_ERRORS } from './errors.js';
import { renderError, sendJson, surfaceOfPath } from './error-middleware.js';

// Time bounds on a request body (docs/limits.md § A body that stops arriving). The server's
// requestTimeout is 0 because a streamed answer may run for minutes, so the body gets bounds of its own
// while it is being received:
//   - idle: no byte for REQUEST_BODY_IDLE_TIMEOUT_MS → 408 and the connection closed;
//   - total: the whole body not arrived within REQUEST_BODY_TIMEOUT_MS of the request's start → 408
//     and the connection closed, whatever its pace (one byte every 5 s never trips the idle bound);
//   - answered early (a credential refused before the body is read): the rest of the body is not
//     drained; the connection is closed right after the answer.
// Once the body has arrived (or for a request with none) the bounds are off, so a streamed answer is
// never cut by them.

/** How long a closing connection keeps reading (and dropping) what the client still sends after our FIN,
 * so that closing with unread bytes does not reset the connection before the client has read the answer. */
const LINGER_MS = 2_000;

/** True when the request announces a body (RFC 9112 §6.3: Content-Length > 0 or Transfer-Encoding). */
const announcesBody = (req: IncomingMessage): boolean =>
  req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;

/** Half-closes the connection once the answer is written, then ends it after a short linger. */
function closeAfterAnswer(socket: Socket): void {
  if (socket.destroyed) return;
  socket.end();
  setTimeout(() => socket.destroy(), LINGER_MS).unref();
}

export interface BodyTimeBounds {
  /** Longest silence within a body (0: off). */
  idleMs: number;
  /** Longest time for the whole body, from the request's start (0: off). */
  totalMs: number;
}

export function limitBodyTime(server: Server, bounds: BodyTimeBounds): void {
  const { idleMs, totalMs } = bounds;
  // Ahead of the app's own listener: a route may answer within the request event itself (a refusal
  // before any body is read), and that answer must already carry `Connection: close`.
  server.prependListener('request', (req: IncomingMessage, res: ServerResponse) => {
    if (!announcesBody(req)) return;
    const socket = req.socket;
    // An answer written before the body has arrived says `Connection: close` (RFC 9112 §9.6), so a
    // keep-alive client does not send its next request on a connection we are about to close; once the
    // body is in, the connection may be kept as usual.
    const keepAlive = res.shouldKeepAlive;
    res.shouldKeepAlive = false;
    let total: NodeJS.Timeout | undefined;
    const cut = (message: string) => {
      clearTimeout(total);
      req.off('timeout', stalled);
      if (res.headersSent) return void socket.destroy();
      // Node's own handler for a socket timeout (destroy) runs only when no one listens; we answer first.
      res.setHeader('connection', 'close');
      const path = (req.url ?? '/').split('?')[0]!;
      sendJson(
        res,
        408,
        renderError(errorOf(COMMON_ERRORS, 'REQUEST_TIMEOUT', message), surfaceOfPath(path)),
      );
      closeAfterAnswer(socket);
    };
    const stalled = () => cut(`no part of the request body arrived for ${idleMs} ms`);
    // 'end': the whole body arrived; the bounds are off.
    req.once('end', () => {
      if (!res.headersSent) res.shouldKeepAlive = keepAlive;
      clearTimeout(total);
      req.off('timeout', stalled);
      // Whatever timeout the server keeps between requests (keep-alive) it sets again itself.
      if (idleMs > 0 && socket.timeout === idleMs) socket.setTimeout(0);
    });
    // Answered before the body arrived: the rest is not read. Node would drain it (and keep the
    // connection for the next request), which a body trickled a byte at a time makes last forever.
    res.once('finish', () => {
      if (req.complete) return;
      clearTimeout(total);
      req.off('timeout', stalled);
      closeAfterAnswer(socket);
    });
    if (totalMs > 0) {
      total = setTimeout(() => {
        if (!req.complete) cut(`the request body did not arrive within ${totalMs} ms`);
      }, totalMs);
      total.unref();
    }
    if (idleMs > 0) {
      req.on('timeout', stalled);
      socket.setTimeout(idleMs);
    }
  });
}
