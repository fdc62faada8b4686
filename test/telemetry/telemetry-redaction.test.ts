import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { waitUntil } from '../helpers/chat-load.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';

// An error's message is never recorded in a span (docs/operations.md, Traces, "Never recorded"): a
// PostgreSQL error's message can quote a value of its statement (`invalid input syntax for type …: "…"`),
// and the `express` instrumentation would put it in the failed span's status and an
// `exception` event (with a stack trace that repeats it). Here a statement of a request fails with a
// message that quotes what the caller sent: a trigger of this test's database refuses a project whose
// name carries a marker, quoting the name, as PostgreSQL's own messages quote input. svc (its own
// process, traced as in production) exports to a real OTLP/HTTP receiver in JSON: the failed statement's
// span is failed with its SQLSTATE as error.type and no message; the marker is nowhere in what was
// exported.

const ERROR = 2;
const MARKER = `leak-${randomBytes(6).toString('hex')}`;

describe.runIf(storageMode() === 'postgres')('error messages stay out of spans', { timeout: 120_000 }, () => {
  let server: TestServer;
  let receiver: OtlpReceiver;
  let svc: ChildSvc;
  let owner: TestUser;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    server = await startTestServer();
    owner = await createUser(server);
    const c = new pg.Client({ connectionString: server.databaseUrl });
    await c.connect();
    try {
      await c.query(`create function refuse_marked_project() returns trigger language plpgsql as $$
        begin raise exception 'project name refused: %', new.name using errcode = 'check_violation'; end $$`);
      await c.query(`create trigger refuse_marked_project before insert on projects for each row
        when (new.name like 'leak-%') execute function refuse_marked_project()`);
    } finally {
      await c.end();
    }
    svc = await startChildSvc({
      DATABASE_URL: server.databaseUrl!,
      ...receiver.env,
    });
  });
  afterAll(async () => {
    await svc?.kill();
    await server?.close();
    await receiver?.close();
  });

  it('a failed statement: status ERROR with its SQLSTATE, neither the message nor the stack anywhere', async () => {
    const traceId = randomBytes(16).toString('hex');
    const res = await fetch(`${svc.url}/v1/projects`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${owner.session}`,
        'content-type': 'application/json',
        traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01`,
      },
      body: JSON.stringify({ org_id: owner.clientId, name: MARKER }),
    });
    // The refusal is no client mistake svc knows of: a 500 that shows nothing of it.
    expect(res.status).toBe(500);
    expect(await res.text()).not.toContain(MARKER);

    const inTrace = () => receiver.spans.filter((s) => s.traceId === traceId);
    const failedInsert = () =>
      inTrace().find(
        (s) =>
          s.status === ERROR &&
          /^pg\.query:INSERT/.test(s.name) &&
          /projects/.test(String(s.attributes['db.query.text'] ?? s.attributes['db.statement'])),
      );
    await waitUntil(() => !!failedInsert() && inTrace().some((s) => s.kind === 2), 15_000);
    const insert: ReceivedSpan = failedInsert()!;
    expect(insert.statusMessage).toBeUndefined();
    // The SQLSTATE (23514, check_violation) names the failure, nothing of the text does.
    expect(insert.attributes['error.type']).toBe('23514');
    for (const span of inTrace()) {
      expect(span.statusMessage ?? '').not.toContain('refused');
      for (const e of span.events) {
        expect(e.attributes['exception.message'] ?? '').not.toMatch(/project name refused/);
        expect(e.attributes['exception.stacktrace']).toBeUndefined();
      }
    }
    expect(receiver.bodies.join('\n')).not.toContain(MARKER);
  });
});
