import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { eventuallyValue } from '../helpers/eventually.js';

// CONTRACT §1, Traces, "each request is a server span" and "an incoming W3C traceparent is continued", as
// svc's own server span makes them (src/telemetry/server-span.ts, decision 0134): svc in its own process
// (OTEL_EXPORTER_OTLP_ENDPOINT set, as in production) exports to a real OTLP/HTTP receiver in JSON,
// decoded here. Named `{method} {http.route}` with the HTTP semantic conventions' attributes, for a route
// of the route table (served ahead of Express) and for Express's; the request's statements its
// descendants, a JSON body read first included; a request without a traceparent a trace of its own.
// On PostgreSQL (the test server's database) and on PGlite (the child's own, in memory).

const SERVER = 2;
const CLIENT = 3;
const ERROR = 2;
const hex = (bytes: number) => randomBytes(bytes).toString('hex');

function traceparent() {
  const traceId = hex(16);
  const parentId = hex(8);
  return { traceId, parentId, header: `00-${traceId}-${parentId}-01` };
}

describe('the server span of each request (CONTRACT §1)', { timeout: 120_000 }, () => {
  let server: TestServer | undefined;
  let receiver: OtlpReceiver;
  let svc: ChildSvc;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    if (storageMode() === 'postgres') server = await startTestServer();
    svc = await startChildSvc({
      ...(server ? { DATABASE_URL: server.databaseUrl! } : {}),
      ...receiver.env,
    });
  });
  afterAll(async () => {
    await svc?.kill();
    await server?.close();
    await receiver?.close();
  });

  /** The server span of the trace `traceId`, once exported (a request's span leaves after its answer). */
  const serverSpanOf = (traceId: string) =>
    eventuallyValue(
      () => receiver.spans.find((s) => s.traceId === traceId && s.kind === SERVER),
      (found) => found !== undefined,
      30_000,
      `the server span of ${traceId}`,
      50,
    ) as Promise<ReceivedSpan>;

  /** Whether `span` descends from `ancestor` by the exported parent links. */
  function descendsFrom(span: ReceivedSpan, ancestor: ReceivedSpan): boolean {
    const inTrace = receiver.spans.filter((s) => s.traceId === ancestor.traceId);
    let at: ReceivedSpan | undefined = span;
    while (at && at.spanId !== ancestor.spanId) at = inTrace.find((s) => s.spanId === at!.parentSpanId);
    return at !== undefined;
  }

  it('an Express route: continues the traceparent, named by its route, with the HTTP attributes', async () => {
    const tp = traceparent();
    const res = await fetch(`${svc.url}/readyz`, { headers: { traceparent: tp.header } });
    expect(res.status).toBe(200);
    const span = await serverSpanOf(tp.traceId);
    expect(span.name).toBe('GET /readyz');
    expect(span.parentSpanId).toBe(tp.parentId);
    expect(span.attributes).toMatchObject({
      'http.request.method': 'GET',
      'http.route': '/readyz',
      'http.response.status_code': 200,
      'url.path': '/readyz',
      'url.scheme': 'http',
      'client.address': '127.0.0.1',
      'network.protocol.version': '1.1',
    });
    expect(span.status).not.toBe(ERROR);
    // The readiness check's statement, a child of the request.
    const statement = await eventuallyValue(
      () => receiver.spans.find((s) => s.traceId === tp.traceId && s.name.startsWith('pg.query')),
      (found) => found !== undefined,
      30_000,
      'the readiness statement',
      50,
    );
    expect(statement!.kind).toBe(CLIENT);
    expect(descendsFrom(statement!, span)).toBe(true);
  });

  it('a route of the route table (ahead of Express): named by its path, its status recorded', async () => {
    const tp = traceparent();
    const res = await fetch(`${svc.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: tp.header },
      body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(401);
    const span = await serverSpanOf(tp.traceId);
    expect(span.name).toBe('POST /v1/chat/completions');
    expect(span.parentSpanId).toBe(tp.parentId);
    expect(span.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': '/v1/chat/completions',
      'http.response.status_code': 401,
    });
    // A client's mistake is no failure of the server's (the HTTP semantic conventions: 5xx alone).
    expect(span.status).not.toBe(ERROR);
  });

  it("a JSON body read before the handler: the handler's statements stay in the request's trace", async () => {
    const tp = traceparent();
    const res = await fetch(`${svc.url}/v1/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: tp.header },
      body: JSON.stringify({
        email: `span-${hex(6)}@example.com`,
        name: 'Sam Span',
        password: `pw-${hex(12)}`,
      }),
    });
    expect(res.status, await res.text()).toBe(200);
    const span = await serverSpanOf(tp.traceId);
    expect(span.name).toBe('POST /v1/register');
    const statements = await eventuallyValue(
      () => receiver.spans.filter((s) => s.traceId === tp.traceId && /^pg\.query:INSERT/.test(s.name)),
      (found) => found.length > 0,
      30_000,
      "the registration's inserts",
      50,
    );
    for (const statement of statements) expect(descendsFrom(statement, span)).toBe(true);
  });

  it('no route: the method alone; no traceparent: a trace of its own; the query by its names only', async () => {
    const res = await fetch(`${svc.url}/v1/no-such-route?code=secret-${hex(4)}`);
    expect(res.status).toBe(404);
    const span = await eventuallyValue(
      () => receiver.spans.find((s) => s.kind === SERVER && s.attributes['url.path'] === '/v1/no-such-route'),
      (found) => found !== undefined,
      30_000,
      'the unrouted request',
      50,
    );
    expect(span!.name).toBe('GET');
    expect(span!.parentSpanId).toBe('');
    expect(span!.attributes['http.route']).toBeUndefined();
    expect(span!.attributes['http.response.status_code']).toBe(404);
    expect(span!.attributes['url.query']).toBe('code=REDACTED');
    expect(receiver.bodies.join('\n')).not.toContain('secret-');
  });
});
