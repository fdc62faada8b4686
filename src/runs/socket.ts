import cluster from 'node:cluster';
import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket, type RawData } from 'ws';
import type { Deps } from '../deps.js';
import { createAuth } from '../auth/principal.js';
import { AppError, errorOf } from '../http/errors.js';
import { RUN_ERRORS } from './errors.js';
import { requestOrigin } from '../http/origin.js';
import { RUNS_PATH } from '../http/paths.js';
import { hostAllowed, refuseForeignUpgrade } from '../http/host-guard.js';
import { orgIdOf } from '../ids.js';
import {
  actorFromToken,
  assertCanSpend,
  checkOrgQuery,
  ORG_HEADER,
  revalidate,
  type Actor,
  type ModelRequest,
} from '../models/admission/actor.js';
import { CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED, parseFrame, type ServerFrame } from './frames.js';
import { errorFrame, newRunId, RunAborted, runAgent } from './loop.js';
import { CLOSE_TOO_MANY_SOCKETS, localSocketCaps, type SocketCaps } from './socket-caps.js';
import { clusterSocketCaps } from './cluster-socket-caps.js';

// The run WebSocket /v1/runs/ws (interface document: Run WebSocket frames; CONTRACT §9), on the HTTP
// server's `upgrade` event (other upgrade paths are left to their owners). The first frame must be
// `auth` within 10 s, else close 4401; before it nothing is answered, not even a ping (a JSON `ping`
// frame closes 4401 like any other first frame; a WebSocket ping gets no pong). An organization and a
// user hold at most RUN_SOCKETS_PER_ORG / RUN_SOCKETS_PER_USER authenticated sockets (socket-caps.ts).
// One run at a time per socket; an `error` frame ends the run it belongs to. ping/pong every 30 s drops
// peers that stopped answering; a dropped socket aborts its run, which bills what was generated.

export interface RunSocketOptions {
  authTimeoutMs: number;
  heartbeatMs: number;
  toolTimeoutMs: number;
  maxPayloadBytes: number;
}

export const DEFAULT_RUN_SOCKET_OPTIONS: RunSocketOptions = {
  authTimeoutMs: 10_000,
  heartbeatMs: 30_000,
  toolTimeoutMs: 120_000,
  maxPayloadBytes: 4 * 1024 * 1024,
};

/** Tests may shorten the timers of a server they start (e.g. the auth deadline). */
export const runSocketOptions: WeakMap<Deps, Partial<RunSocketOptions>> = new WeakMap();

/** Attaches the run socket to `server`; returns a function that closes every open run socket (shutdown). */
export function attachRunSocket(server: Server, deps: Deps): () => void {
  const options = () => ({ ...DEFAULT_RUN_SOCKET_OPTIONS, ...runSocketOptions.get(deps) });
  // autoPong off: a peer's WebSocket ping is answered only once it has authenticated (handleConnection).
  const wss = new WebSocketServer({ noServer: true, maxPayload: options().maxPayloadBytes, autoPong: false });
  const auth = createAuth(deps);
  // A worker of a cluster asks its primary, which counts for every worker (cluster-socket-caps.ts).
  const caps = cluster.isWorker
    ? clusterSocketCaps()
    : localSocketCaps({
        perOrg: deps.config.limits.runSocketsPerOrg,
        perUser: deps.config.limits.runSocketsPerUser,
      });
  const closeAll = () => {
    for (const ws of wss.clients) ws.close(1001, 'server shutting down');
    // Peers that do not answer the close handshake are cut.
    setTimeout(() => {
      for (const ws of wss.clients) ws.terminate();
    }, 1000).unref();
    wss.close();
  };
  deps.onClose(closeAll);

  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const path = (req.url ?? '').split('?')[0];
    if (path !== RUNS_PATH) return;
    // Dev mode answers only its own Host names, upgrades included (CONTRACT §1; src/http/host-guard.ts).
    if (deps.config.devMode && !hostAllowed(req, deps.config))
      return refuseForeignUpgrade(req, socket, deps.config);
    wss.handleUpgrade(req, socket, head, (ws) => {
      const opts = options();
      keepAlive(ws, opts.heartbeatMs);
      handleConnection(deps, auth, caps, ws, req, opts);
    });
  });
  return closeAll;
}

/** RFC 6455 §5.5.2: ping every interval; a peer that did not pong since the last ping is dropped. */
function keepAlive(ws: WebSocket, intervalMs: number) {
  let answered = true;
  ws.on('pong', () => {
    answered = true;
  });
  const timer = setInterval(() => {
    if (!answered) {
      ws.terminate();
      return;
    }
    answered = false;
    ws.ping();
  }, intervalMs);
  timer.unref();
  ws.on('close', () => clearInterval(timer));
}

function handleConnection(
  deps: Deps,
  auth: ReturnType<typeof createAuth>,
  caps: SocketCaps,
  ws: WebSocket,
  req: IncomingMessage,
  options: RunSocketOptions,
) {
  // `org_id` in the upgrade's query must name the acting organization, as on the HTTP model routes
  // (CONTRACT §9); sent twice, it is refused like a mismatch.
  const orgIds = new URL(req.url ?? '/', 'http://upgrade').searchParams.getAll('org_id');
  const httpLike: ModelRequest = {
    headers: req.headers,
    socket: req.socket,
    query: orgIds.length === 0 ? {} : { org_id: orgIds.length === 1 ? orgIds[0] : orgIds },
  };
  const origin = requestOrigin(httpLike, deps.config);
  let token: string | null = null;
  let actor: Actor | null = null;
  let run: { id: string; controller: AbortController } | null = null;
  let releaseCap: (() => void) | null = null;
  let unwatch: (() => void) | null = null;
  const pending = new Map<
    string,
    {
      resolve: (r: { status: string; result: unknown }) => void;
      reject: (e: Error) => void;
      timer: NodeJS.Timeout;
    }
  >();

  const send = (frame: ServerFrame) => {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(frame));
  };

  const authTimer = setTimeout(() => {
    if (!actor) ws.close(CLOSE_UNAUTHENTICATED, 'authentication timeout');
  }, options.authTimeoutMs);

  let orgHeader = req.headers[ORG_HEADER] as string | undefined;

  /**
   * Before every model call of a run (Authentication 5): an `svc_` token is resolved again (a revoked
   * token stops the run) with its live membership; a model grant's live membership is read again (its
   * 15-minute expiry is checked at auth only, so a long run is not cut by it).
   */
  const recheck = async (): Promise<Actor> => {
    if (actor!.via === 'model_grant') return revalidate(deps, actor!);
    const fresh = await actorFromToken(deps, auth, { token: token!, origin, orgHeader });
    assertCanSpend(fresh.role);
    return fresh;
  };

  function abortRun(reason: string) {
    if (!run) return;
    run.controller.abort(new RunAborted(reason));
    for (const [, p] of pending) {
      clearTimeout(p.timer);
      p.reject(new RunAborted(reason));
    }
    pending.clear();
  }

  /** An error frame ends the run it belongs to (interface document). */
  function fail(err: unknown) {
    const runId = run?.id;
    if (!(err instanceof AppError)) deps.log.error({ err, runId }, 'run failed');
    abortRun('error');
    send(errorFrame(err, runId));
  }

  async function startRun(agentName: string, messages: unknown[]) {
    const agent = deps.models.agents.get(agentName);
    if (!agent)
      return fail(errorOf(RUN_ERRORS, 'UNKNOWN_AGENT', `no agent named '${agentName}' (see GET /v1/agents)`));
    const current = { id: newRunId(), controller: new AbortController() };
    run = current;
    try {
      await runAgent(
        deps,
        {
          runId: current.id,
          agent,
          messages: messages as never,
          recheck,
          signal: current.controller.signal,
          toolTimeoutMs: options.toolTimeoutMs,
          traceHeaders: req.headers,
        },
        {
          send,
          toolResult: (id, timeoutMs) =>
            new Promise((resolve, reject) => {
              const timer = setTimeout(() => {
                pending.delete(id);
                reject(
                  errorOf(
                    RUN_ERRORS,
                    'TOOL_TIMEOUT',
                    `no tool_result for ${id} within ${Math.round(timeoutMs / 1000)} s`,
                  ),
                );
              }, timeoutMs);
              pending.set(id, { resolve, reject, timer });
            }),
        },
      );
    } catch (err) {
      if (run === current && !(err instanceof RunAborted)) fail(err);
    } finally {
      if (run === current) run = null;
      for (const [, p] of pending) clearTimeout(p.timer);
      pending.clear();
    }
  }

  /**
   * Deleting the client ends its runs (CONTRACT §8; src/billing/live-calls.ts): the run is aborted and
   * billed for what it generated (runAgent), an `error client_deleted` frame ends it, and the socket,
   * whose credential the deletion revoked, is closed 4403.
   */
  function watchDeletion(orgKey: string) {
    const { signal, done } = deps.billing.liveCalls.watch(orgKey);
    unwatch = done;
    signal.addEventListener(
      'abort',
      () => {
        const runId = run?.id;
        abortRun('client deleted');
        send(errorFrame(signal.reason, runId));
        ws.close(CLOSE_FORBIDDEN, 'client deleted');
      },
      { once: true },
    );
  }

  /** Before authentication a frame that is not a well-formed `auth` frame ends the socket (auth "must be the first frame"). */
  function refuseUnauthenticated(err: AppError) {
    send(errorFrame(err));
    ws.close(CLOSE_UNAUTHENTICATED, 'unauthenticated');
  }

  async function onFrame(data: RawData, isBinary: boolean) {
    const parsed = isBinary ? { error: 'frames are JSON text' } : parseFrame(frameText(data));
    if ('error' in parsed) {
      const err = errorOf(RUN_ERRORS, 'BAD_FRAME', parsed.error);
      return actor ? fail(err) : refuseUnauthenticated(err);
    }
    const frame = parsed.frame;
    if (!actor) {
      if (ws.readyState !== ws.OPEN) return; // a failed auth already closed it
      if (frame.type !== 'auth') {
        return refuseUnauthenticated(errorOf(RUN_ERRORS, 'UNAUTHENTICATED'));
      }
      try {
        token = frame.token;
        orgHeader = frame.organisation ?? orgHeader;
        const resolved = await actorFromToken(deps, auth, { token, origin, orgHeader });
        checkOrgQuery(httpLike, resolved);
        const release = await caps.take(resolved);
        if (release && ws.readyState !== ws.OPEN) return release(); // it closed while the count was asked
        releaseCap = release;
        if (!releaseCap) {
          send(errorFrame(errorOf(RUN_ERRORS, 'TOO_MANY_SOCKETS')));
          ws.close(CLOSE_TOO_MANY_SOCKETS, 'too many sockets');
          return;
        }
        actor = resolved;
        watchDeletion(actor.orgKey);
        clearTimeout(authTimer);
        send({ type: 'authenticated', client_id: orgIdOf(actor.orgKey) });
      } catch (err) {
        send(errorFrame(err));
        ws.close(CLOSE_UNAUTHENTICATED, 'authentication failed');
      }
      return;
    }
    switch (frame.type) {
      case 'ping':
        return send({ type: 'pong' });
      case 'auth':
        return fail(errorOf(RUN_ERRORS, 'ALREADY_AUTHENTICATED'));
      case 'start':
        if (run) return fail(errorOf(RUN_ERRORS, 'RUN_IN_PROGRESS'));
        void startRun(frame.agent, frame.messages);
        return;
      case 'tool_result': {
        const waiter = pending.get(frame.tool_call_id);
        if (!waiter)
          return fail(
            errorOf(
              RUN_ERRORS,
              'UNKNOWN_TOOL_CALL',
              `no tool call ${frame.tool_call_id} is waiting for a result`,
            ),
          );
        pending.delete(frame.tool_call_id);
        clearTimeout(waiter.timer);
        waiter.resolve({ status: frame.status, result: frame.result });
        return;
      }
      case 'cancel':
        if (!run) return fail(errorOf(RUN_ERRORS, 'NO_RUN'));
        {
          const id = run.id;
          abortRun('cancelled');
          run = null;
          send({ type: 'error', code: 'cancelled', message: 'the run was cancelled', run_id: id });
        }
        return;
    }
  }

  // Frames are handled one after another in arrival order: a client may send `start` right behind
  // `auth` without waiting for `authenticated`, and that `start` must see the authenticated socket, not
  // be refused because the auth frame's credential read was still in flight. Only the auth frame awaits
  // here (a run goes on in the background), so nothing else is held up.
  let inbox: Promise<void> = Promise.resolve();
  ws.on('message', (data, isBinary) => {
    inbox = inbox.then(() => onFrame(data, isBinary)).catch((err: unknown) => fail(err));
  });
  ws.on('ping', (data) => {
    if (actor) ws.pong(data);
  });
  ws.on('close', () => {
    releaseCap?.();
    unwatch?.();
    clearTimeout(authTimer);
    abortRun('socket closed');
  });
  ws.on('error', () => {
    // A protocol error closes the socket; 'close' follows and aborts the run.
  });
}

/** A text frame's bytes as UTF-8: ws hands a Buffer, or a list of them or an ArrayBuffer by binaryType
 *  (a plain toString() of either of those would read "a,b" or "[object ArrayBuffer]"). */
function frameText(data: RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  if (data instanceof ArrayBuffer) return Buffer.from(data).toString('utf8');
  return data.toString('utf8');
}
