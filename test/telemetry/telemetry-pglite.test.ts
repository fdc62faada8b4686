import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { eventuallyValue } from '../helpers/eventually.js';

// CONTRACT §1, Traces, "database statements as spans", with the embedded PGlite (no DATABASE_URL): svc
// in its own process exports to a real OTLP/HTTP receiver (JSON, decoded here), and each statement a
// request makes is a client span `pg.query:{COMMAND}` with `db.system.name` postgresql and the
// statement's text with its placeholders, as svc makes them for PostgreSQL
// (test/telemetry/telemetry-traces.test.ts): inside a transaction too, never a value, and none outside
// a request (the background sweeps run every second or so, and make no traces).

const CLIENT = 3;
const hex = (bytes: number) => randomBytes(bytes).toString('hex');

describe('PGlite statement spans (CONTRACT §1)', { timeout: 120_000 }, () => {
  let receiver: OtlpReceiver;
  let svc: ChildSvc;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    svc = await startChildSvc({
      DATA_DIR: 'memory://',
      ...receiver.env,
    });
  });
  afterAll(async () => {
    await svc?.kill();
    await receiver?.close();
  });

  const isStatement = (s: ReceivedSpan) => s.name.startsWith('pg.query');

  it("a request's statements are spans of its trace, shaped as PostgreSQL's", async () => {
    const traceId = hex(16);
    const email = `pglite-${hex(6)}@example.com`;
    const password = `pw-${hex(12)}`;
    const res = await fetch(`${svc.url}/v1/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', traceparent: `00-${traceId}-${hex(8)}-01` },
      body: JSON.stringify({ email, name: 'Pia Glite', password }),
    });
    expect(res.status, await res.text()).toBe(200);

    const server = await eventuallyValue(
      () => receiver.spans.find((s) => s.traceId === traceId && s.name === 'POST /v1/register'),
      (found) => found !== undefined,
      30_000,
      'the request span',
      100,
    );
    const inTrace = receiver.spans.filter((s) => s.traceId === traceId);
    const statements = inTrace.filter(isStatement);
    expect(statements.length).toBeGreaterThan(2);
    const ids = new Set(inTrace.map((s) => s.spanId));
    for (const s of statements) {
      expect(s.kind).toBe(CLIENT);
      expect(s.name).toMatch(/^pg\.query:[A-Z]+$/);
      expect(s.attributes['db.system.name']).toBe('postgresql');
      expect(typeof s.attributes['db.query.text']).toBe('string');
      // A child of a span of the request (the server span, a handler's, svc's own), never a root.
      expect(ids.has(s.parentSpanId)).toBe(true);
    }
    // The account is written with placeholders: its statement is there, its values are not.
    const insertUser = statements.find((s) =>
      /insert into "users"/i.test(String(s.attributes['db.query.text'])),
    );
    expect(insertUser?.name).toBe('pg.query:INSERT');
    expect(String(insertUser!.attributes['db.query.text'])).toMatch(/\$1/);
    expect(server!.kind).toBe(2);
    const exported = receiver.bodies.join('\n');
    expect(exported).not.toContain(email);
    expect(exported).not.toContain(password);
  });

  it("the credential read (the engine's named statements, not its `query`) is a span of the request", async () => {
    const email = `lane-${hex(6)}@example.com`;
    const password = `pw-${hex(12)}-A1!`;
    const post = (path: string, body: unknown) =>
      fetch(`${svc.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    expect((await post('/v1/register', { email, name: 'Lane Reader', password })).status).toBe(200);
    const login = await post('/v1/login', { email, password });
    const { session_token: session } = (await login.json()) as { session_token: string };
    const traceId = hex(16);
    await fetch(`${svc.url}/v1/auth/verify`, {
      headers: { authorization: `Bearer ${session}`, traceparent: `00-${traceId}-${hex(8)}-01` },
    });
    const read = await eventuallyValue(
      () =>
        receiver.spans.find(
          (s) =>
            s.traceId === traceId &&
            isStatement(s) &&
            /from sessions s/.test(String(s.attributes['db.query.text'])),
        ),
      (found) => found !== undefined,
      30_000,
      'the session read span',
      100,
    );
    expect(read!.name).toBe('pg.query:SELECT');
    expect(read!.parentSpanId).not.toBe('');
  });

  it('statements outside a request (the sweeps) make no spans', async () => {
    // The sweeps have run many times by now (each process's own, every second or few).
    await eventuallyValue(
      () => receiver.spans.length,
      (n) => n > 0,
      30_000,
      'some spans',
      100,
    );
    const roots = receiver.spans.filter((s) => isStatement(s) && s.parentSpanId === '');
    expect(roots).toEqual([]);
  });
});
