import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Tracer,
} from '@opentelemetry/api';
import { RPCType, setRPCMetadata, type RPCMetadata } from '@opentelemetry/core';

// Each request's server span (CONTRACT §1, Traces), made by svc where it takes the request (src/server.ts's
// listener), in place of the `http` instrumentation (decision 0134): that one bound every listener added
// to the request and the response to the request's context and built a dozen attributes per request,
// the largest part of tracing's cost on the chat path. Named and attributed as the HTTP semantic
// conventions say for a server: `{method} {http.route}` (the method alone while no route is known),
// http.request.method, url.path, url.query (names only), url.scheme, client.address,
// network.protocol.version, http.route, http.response.status_code; status ERROR for a 5xx alone, with
// error.type the status code. An incoming W3C `traceparent` is continued (the registered propagator).
//
// The route: a row of the route table names it before its steps run (src/http/entry-steps.ts:
// nameRoute); an Express route through the express instrumentation, which writes the matched route into
// the request's RPC metadata, the same record nameRoute writes.

const KNOWN_METHODS = new Set([
  'GET',
  'HEAD',
  'POST',
  'PUT',
  'PATCH',
  'DELETE',
  'OPTIONS',
  'CONNECT',
  'TRACE',
]);

/** A request's path and query (`?…`, empty when none), split by hand: no URL parse per request (decision 0121). */
function splitTarget(target: string): { path: string; search: string } {
  const at = target.indexOf('?');
  if (at < 0) return { path: target, search: '' };
  return { path: target.slice(0, at), search: at === target.length - 1 ? '' : target.slice(at) };
}

/** A request's query for its span: the names only (a value can be a code or a token). */
function queryNamesOnly(search: string): string {
  return [...new URLSearchParams(search).keys()].map((k) => `${k}=REDACTED`).join('&');
}

/** Share links carry their secret in the path (`/s/<token>`): the span gets the route's shape instead.
 * The path is the request's as sent (`/x/../s/<token>` too), so the segment is found wherever it stands. */
const SECRET_PATHS: [RegExp, string][] = [[/\/s\/[^/]+/g, '/s/:token']];

function safePath(path: string): string {
  for (const [pattern, replacement] of SECRET_PATHS) path = path.replace(pattern, replacement);
  return path;
}

/** `url.path` and `url.query` of a request target: no share-link token, no query value. */
export function targetAttributes(target: string): Record<string, string> {
  const { path, search } = splitTarget(target);
  return search
    ? { 'url.path': safePath(path), 'url.query': queryNamesOnly(search) }
    : { 'url.path': safePath(path) };
}

function requestAttributes(req: IncomingMessage, method: string): Attributes {
  const attributes: Attributes = {
    'http.request.method': method,
    ...targetAttributes(req.url ?? '/'),
    'url.scheme': 'http',
    'network.protocol.version': req.httpVersion,
  };
  if (method === '_OTHER') attributes['http.request.method_original'] = req.method;
  // The peer's address: a client-written X-Forwarded-For is not an address svc trusts (CONTRACT §1,
  // TRUST_PROXY).
  const peer = req.socket.remoteAddress;
  if (peer) attributes['client.address'] = peer;
  return attributes;
}

/**
 * `emitter.emit` run in `ctx`: the request's body events come from the socket, which was opened before the
 * request and carries no context of it; a body reader that goes on from its `end` callback (a body
 * parser calling next()) would leave the request's trace. One wrapper per emitter, not one per listener.
 */
function emitIn(ctx: Context, emitter: IncomingMessage | ServerResponse): void {
  // eslint-disable-next-line @typescript-eslint/unbound-method -- called below with the emitter as `this`
  const emit = emitter.emit as (this: unknown, ...args: unknown[]) => boolean;
  emitter.emit = function emitInRequest(this: unknown, ...args: unknown[]) {
    return context.with(ctx, emit, this, ...args);
  } as typeof emitter.emit;
}

/** `listener` with a server span around each request it serves. */
export function serverSpans(tracer: Tracer): (listener: RequestListener) => RequestListener {
  return (listener) => (req, res) => {
    const upper = req.method ?? 'GET';
    const method = KNOWN_METHODS.has(upper) ? upper : '_OTHER';
    // Without trace-context or baggage headers there is nothing to continue: no propagator's pass.
    const headers = req.headers;
    const parent =
      headers.traceparent === undefined && headers.baggage === undefined
        ? ROOT_CONTEXT
        : propagation.extract(ROOT_CONTEXT, headers);
    const span = tracer.startSpan(
      method === '_OTHER' ? 'HTTP' : method,
      { kind: SpanKind.SERVER, attributes: requestAttributes(req, method) },
      parent,
    );
    const rpc: RPCMetadata = { type: RPCType.HTTP, span };
    const ctx = setRPCMetadata(trace.setSpan(parent, span), rpc);
    let ended = false;
    // Finished (the last byte handed to the socket) or closed first (the client went away mid-answer).
    const end = () => {
      if (ended) return;
      ended = true;
      if (rpc.route) {
        span.updateName(`${method === '_OTHER' ? 'HTTP' : method} ${rpc.route}`);
        span.setAttribute('http.route', rpc.route);
      }
      if (res.headersSent) {
        span.setAttribute('http.response.status_code', res.statusCode);
        if (res.statusCode >= 500) {
          span.setAttribute('error.type', String(res.statusCode));
          span.setStatus({ code: SpanStatusCode.ERROR });
        }
      }
      span.end();
    };
    res.once('finish', end);
    res.once('close', end);
    emitIn(ctx, req);
    emitIn(ctx, res);
    context.with(ctx, listener, undefined, req, res);
  };
}
