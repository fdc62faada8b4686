import { createServer, type RequestListener, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Deps } from './deps.js';
import { buildApp, entryTable } from './app.js';
import { createAuth } from './auth/principal.js';
import { servedAheadOfExpress } from './http/entry-steps.js';
import { attachRunSocket } from './runs/socket.js';
import { limitBodyTime } from './http/body-idle.js';
import { tracedRequests } from './telemetry/spans.js';

export interface RunningServer {
  servers: Server[];
  port: number;
  close(): Promise<void>;
}

/**
 * Serves the app on `port` at each of `hosts` (one listener per host, all sharing the app and the run
 * socket). Port 0 picks a free port on the first host and reuses it on the others.
 */
export async function startServer(deps: Deps, hosts: string[], port: number): Promise<RunningServer> {
  const auth = createAuth(deps);
  // Chat calls and form-encoded token requests without a query string skip Express (the route table's rows
  // marked aheadOfExpress: src/app.ts; decisions 0001 and 0021); the app serves the rest.
  const serve = servedAheadOfExpress(deps, entryTable(deps, auth), buildApp(deps, auth));
  // After SIGTERM (deps.lifecycle.draining), no new request is taken on any connection, keep-alive ones
  // included: 503 with Retry-After, and `Connection: close` on every answer, so clients reconnect to a
  // live process (docs/operations.md).
  const inFlight = new Set<ServerResponse>();
  // Each request a server span when tracing is on (CONTRACT §1; src/telemetry/server-span.ts).
  const handler: RequestListener = tracedRequests((req, res) => {
    // No answer is to be read as anything but its Content-Type, JSON above all: a
    // JSON error echoing input must never be sniffed into HTML or script. Pages set it too (html.ts).
    res.setHeader('X-Content-Type-Options', 'nosniff');
    if (deps.lifecycle.draining) {
      res.shouldKeepAlive = false;
      res.writeHead(503, { 'retry-after': '1', connection: 'close', 'content-type': 'application/json' });
      res.end('{"error":{"message":"the server is shutting down; try again","code":"shutting_down"}}');
      return;
    }
    inFlight.add(res);
    res.once('close', () => {
      inFlight.delete(res);
      // Draining: the connection this answer leaves idle is closed at once, not at the grace's end.
      if (deps.lifecycle.draining) setImmediate(() => servers.forEach((s) => s.closeIdleConnections()));
    });
    serve(req, res);
  });
  const servers: Server[] = [];
  // Upgraded sockets (the run WebSocket) are not idle HTTP connections: closed explicitly on shutdown.
  const closeSockets: (() => void)[] = [];
  let boundPort = port;
  for (const host of hosts) {
    const server = createServer(handler);
    // Slow-loris and idle-socket protection; keep-alive longer than typical proxies' idle timeout.
    server.headersTimeout = 30_000;
    server.requestTimeout = 0; // streaming responses (SSE) may run long; the model layer has its own timeouts
    server.keepAliveTimeout = 65_000;
    // A body that stops arriving, or takes too long in all: 408 (docs/limits.md).
    limitBodyTime(server, {
      idleMs: deps.config.limits.bodyIdleTimeoutMs,
      totalMs: deps.config.limits.bodyTimeoutMs,
    });
    closeSockets.push(attachRunSocket(server, deps));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(boundPort, host, () => resolve());
    });
    boundPort = (server.address() as AddressInfo).port;
    servers.push(server);
  }
  return {
    servers,
    port: boundPort,
    async close() {
      deps.lifecycle.draining = true;
      for (const res of inFlight) {
        res.shouldKeepAlive = false;
        if (!res.headersSent) res.setHeader('connection', 'close');
      }
      for (const closeRuns of closeSockets) closeRuns();
      await Promise.all(
        servers.map(
          (s) =>
            new Promise<void>((resolve) => {
              s.close(() => resolve());
              s.closeIdleConnections();
              // Requests still in flight (long streams) get SHUTDOWN_GRACE_SECONDS, then their sockets are
              // closed; a stream cut so is billed for what it delivered (src/models/front-ends/chat.ts).
              setTimeout(() => s.closeAllConnections(), deps.config.reliability.shutdownGraceMs).unref();
            }),
        ),
      );
    },
  };
}
