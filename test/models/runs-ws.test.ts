import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { and, eq } from 'drizzle-orm';
import { leaseRows, waitForNoLeases } from '../helpers/leases.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { billingEntries, memberships } from '../../src/db/schema.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { runSocketOptions } from '../../src/runs/socket.js';
import type { ServerFrame } from '../../src/runs/frames.js';
import { at, parseAs } from '../helpers/json.js';
import { eventually, eventuallyValue } from '../helpers/eventually.js';

// The run WebSocket with a real `ws` client against a fake provider. Prices: a model call debits
// prompt + 2 × completion tokens (see models-chat.test.ts).

let server: TestServer;
let fake: FakeUpstream;
let owner: TestUser;
let key: string;

/** A ws client that queues frames so a test can await them in order. */
async function connect(base = server.url, query = '') {
  const ws = new WebSocket(`${base.replace('http', 'ws')}/v1/runs/ws${query}`);
  const frames: ServerFrame[] = [];
  let closed: { code: number; reason: string } | null = null;
  ws.on('message', (d) => {
    frames.push(parseAs<ServerFrame>((d as Buffer).toString()));
  });
  ws.on('close', (code, reason) => {
    closed = { code, reason: reason.toString() };
  });
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  return {
    ws,
    frames,
    send: (frame: unknown) => ws.send(typeof frame === 'string' ? frame : JSON.stringify(frame)),
    /** The next frame (of `type` when given), skipping others. */
    async next<K extends ServerFrame['type'] = ServerFrame['type']>(
      type?: K,
      timeoutMs = 5000,
    ): Promise<Extract<ServerFrame, { type: K }>> {
      const wanted = (f: ServerFrame): f is Extract<ServerFrame, { type: K }> => !type || f.type === type;
      const found = await eventuallyValue(
        () => frames.find(wanted),
        (f) => f !== undefined || closed !== null,
        timeoutMs,
        'a frame',
        5,
      ).catch(() => {
        throw new Error(`no ${type ?? 'frame'} frame; got ${JSON.stringify(frames)}`);
      });
      if (!found)
        throw new Error(
          `socket closed ${closed!.code} before a ${type ?? 'frame'} frame; got ${JSON.stringify(frames)}`,
        );
      frames.splice(frames.indexOf(found), 1);
      return found;
    },
    async closedWith(timeoutMs = 5000) {
      await eventually(() => closed !== null, timeoutMs, 'the socket closed').catch(() => undefined);
      return closed;
    },
  };
}

const usageRows = () =>
  server.deps.db
    .select()
    .from(billingEntries)
    .where(and(eq(billingEntries.orgKey, owner.orgKey), eq(billingEntries.type, 'usage')))
    .orderBy(billingEntries.id); // in the order written, whatever the plan
const leaseCount = async () => (await leaseRows(server, owner.orgKey)).length;

beforeAll(async () => {
  fake = await startFakeUpstream();
  server = await startTestServer({
    env: fake.env({ RUN_MAX_STEPS: '4' }),
  });
  owner = await createUser(server);
  key = (await createApiToken(server, owner, owner.orgKey)).secret;
});

afterAll(async () => {
  await server?.close();
  await fake?.close();
});

beforeEach(async () => {
  fake.chunkDelayMs = 0;
  fake.failStatus = null;
  // Two tool round-trips, then an answer: the reply depends on how many tool results came back.
  fake.reply = (body) => {
    const results = body.messages.filter((m: { role: string }) => m.role === 'tool').length;
    if (results === 0) return { toolCalls: [{ name: 'read_file', arguments: '{"path":"README.md"}' }] };
    if (results === 1) return { toolCalls: [{ name: 'list_directory', arguments: '{"path":"."}' }] };
    return { content: 'All done here' };
  };
  await setOrgBalance(server, owner.orgKey, 10_000);
});

describe('/v1/runs/ws', () => {
  it('runs a full loop with two tool round-trips, billing each model call', async () => {
    const c = await connect();
    c.send({ type: 'auth', token: key });
    expect(await c.next('authenticated')).toEqual({ type: 'authenticated', client_id: owner.orgId });
    const rowsBefore = (await usageRows()).length;
    const balanceBefore = await orgBalanceCredits(server.deps.db, owner.orgKey);
    c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'Look at the readme' }] });

    const m1 = await c.next('assistant_message');
    expect(at(m1.message.tool_calls, '0', 'function', 'name')).toBe('read_file');
    const t1 = await c.next('tool_call');
    expect(t1).toMatchObject({ name: 'read_file', arguments: '{"path":"README.md"}' });
    expect(await leaseCount()).toBe(1); // the run holds a lease
    c.send({ type: 'tool_result', tool_call_id: t1.tool_call_id, status: 'ok', result: '# svc' });

    const t2 = await c.next('tool_call');
    expect(t2.name).toBe('list_directory');
    c.send({
      type: 'tool_result',
      tool_call_id: t2.tool_call_id,
      status: 'ok',
      result: { entries: ['README.md'] },
    });

    expect((await c.next('assistant_message')).step).toBe(2);
    const m3 = await c.next('assistant_message');
    expect(m3.message.content).toBe('All done here');
    const done = await c.next('run_completed');
    // Three model calls: 2 × (10 + 2×5) + (10 + 2×3)
    expect(done).toMatchObject({
      stop_reason: 'completed',
      steps: 3,
      credits_debited: 56,
      usage: { prompt_tokens: 30, completion_tokens: 13 },
    });
    expect(done.balance_credits).toBe(balanceBefore - 56);
    expect(await orgBalanceCredits(server.deps.db, owner.orgKey)).toBe(balanceBefore - 56);
    expect((await usageRows()).length).toBe(rowsBefore + 3);
    // The provider saw the agent's tools and the tool results in order.
    const last = fake.requests.at(-1)!.body;
    expect(last.tools!.map((t) => (t.type === 'function' ? t.function.name : t.type))).toEqual([
      'read_file',
      'write_file',
      'list_directory',
      'run_command',
    ]);
    expect(last.messages.filter((m) => m.role === 'tool').map((m) => m.content)).toEqual([
      '# svc',
      '{"entries":["README.md"]}',
    ]);
    expect(await waitForNoLeases(server, owner.orgKey)).toBe(0);

    // The socket takes another run afterwards.
    fake.reply = () => ({ content: 'again' });
    c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'hi' }] });
    expect((await c.next('run_completed')).steps).toBe(1);
    c.ws.close();
  });

  it('stops at RUN_MAX_STEPS', async () => {
    fake.reply = () => ({ toolCalls: [{ name: 'run_command', arguments: '{"command":"true"}' }] });
    const c = await connect();
    c.send({ type: 'auth', token: key });
    await c.next('authenticated');
    c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'loop' }] });
    for (let i = 0; i < 4; i++) {
      const t = await c.next('tool_call');
      c.send({ type: 'tool_result', tool_call_id: t.tool_call_id, status: 'ok', result: '' });
    }
    expect(await c.next('run_completed')).toMatchObject({ stop_reason: 'max_steps', steps: 4 });
    c.ws.close();
  });

  it('a plain GET (no WebSocket upgrade) is told to upgrade: 426', async () => {
    const res = await fetch(`${server.url}/v1/runs/ws`);
    expect(res.status).toBe(426);
    expect(res.headers.get('upgrade')).toBe('websocket');
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('upgrade_required');
  });

  it('closes 4401 when no auth frame arrives in time', async () => {
    runSocketOptions.set(server.deps, { authTimeoutMs: 200 });
    try {
      const c = await connect();
      expect((await c.closedWith(3000))?.code).toBe(4401);
    } finally {
      runSocketOptions.delete(server.deps);
    }
  });

  it('refuses a bad token and a first frame that is not auth (4401)', async () => {
    const a = await connect();
    a.send({ type: 'auth', token: 'svc_' + 'x'.repeat(43) });
    expect((await a.next('error')).code).toBe('invalid_token');
    expect((await a.closedWith())?.code).toBe(4401);
    const b = await connect();
    b.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'hi' }] });
    expect((await b.next('error')).code).toBe('unauthenticated');
    expect((await b.closedWith())?.code).toBe(4401);
    // "auth ... must be the first frame" (interface document): a first frame that is not even a
    // well-formed auth frame is refused the same way, not answered and left open.
    for (const first of ['not json', { type: 'auth' }, { type: 'launch_missiles' }]) {
      const d = await connect();
      d.send(first);
      expect((await d.next('error')).code, JSON.stringify(first)).toBe('bad_frame');
      expect((await d.closedWith())?.code, JSON.stringify(first)).toBe(4401);
    }
    const e = await connect();
    e.ws.send(Buffer.from('{"type":"auth"}'), { binary: true });
    expect((await e.next('error')).code).toBe('bad_frame');
    expect((await e.closedWith())?.code).toBe(4401);
  });

  it('org_id on the upgrade must name the acting organization (either spelling), else org_mismatch and 4401', async () => {
    for (const id of [owner.orgId, owner.clientId]) {
      const ok = await connect(server.url, `?org_id=${id}`);
      ok.send({ type: 'auth', token: key });
      expect((await ok.next('authenticated')).client_id, id).toBe(owner.orgId);
      ok.ws.close();
    }
    const other = await createUser(server);
    for (const query of [
      `?org_id=${other.orgId}`,
      `?org_id=${owner.orgId}&org_id=${owner.orgId}`,
      '?org_id=nonsense',
    ]) {
      const bad = await connect(server.url, query);
      bad.send({ type: 'auth', token: key });
      expect((await bad.next('error')).code, query).toBe('org_mismatch');
      expect((await bad.closedWith())?.code, query).toBe(4401);
    }
  });

  it('a start sent right behind the auth frame (not waiting for authenticated) runs', async () => {
    // The document asks only that auth be the first frame; a client may pipeline start behind it. Several
    // sockets, because whether start arrives while the credential is still being read is a matter of timing.
    fake.reply = () => ({ content: 'pipelined' });
    for (let i = 0; i < 8; i++) {
      const c = await connect();
      c.send({ type: 'auth', token: key });
      c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'hi' }] });
      expect((await c.next()).type).toBe('authenticated');
      expect((await c.next('run_completed')).stop_reason).toBe('completed');
      c.ws.close();
    }
  });

  it('answers bad frames with an error and keeps serving', async () => {
    const c = await connect();
    c.send({ type: 'auth', token: key });
    await c.next('authenticated');
    c.send('not json');
    expect((await c.next('error')).code).toBe('bad_frame');
    c.send({ type: 'start', agent: 'default' });
    expect((await c.next('error')).code).toBe('bad_frame');
    c.send({ type: 'launch_missiles' });
    expect((await c.next('error')).code).toBe('bad_frame');
    c.ws.send(Buffer.from([1, 2, 3]), { binary: true });
    expect((await c.next('error')).code).toBe('bad_frame');
    c.send({ type: 'tool_result', tool_call_id: 'nope', status: 'ok', result: 1 });
    expect((await c.next('error')).code).toBe('unknown_tool_call');
    c.send({ type: 'start', agent: 'no-such-agent', messages: [{ role: 'user', content: 'hi' }] });
    expect((await c.next('error')).code).toBe('unknown_agent');
    fake.reply = () => ({ content: 'still here' });
    c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'hi' }] });
    expect((await c.next('run_completed')).stop_reason).toBe('completed');
    c.ws.close();
  });

  it('one run at a time per socket', async () => {
    const c = await connect();
    c.send({ type: 'auth', token: key });
    await c.next('authenticated');
    c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'read it' }] });
    const t = await c.next('tool_call');
    c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'another' }] });
    const err = await c.next('error');
    expect(err.code).toBe('run_in_progress');
    // The error ended the run (interface document: error ends the run); its result is now unexpected.
    c.send({ type: 'tool_result', tool_call_id: t.tool_call_id, status: 'ok', result: 'late' });
    expect((await c.next('error')).code).toBe('unknown_tool_call');
    expect(await waitForNoLeases(server, owner.orgKey)).toBe(0);
    c.ws.close();
  });

  it('takes a model grant, acting for the organisation named in the auth frame', async () => {
    const member = await createUser(server);
    await addMember(server, owner.orgKey, member.userId, 'member');
    const grants = await issueTestGrants(server, member, {
      orgKey: member.orgKey,
      resources: ['model'],
      origin: server.v2Url,
    });
    fake.reply = () => ({ content: 'granted' });
    const before = await orgBalanceCredits(server.deps.db, owner.orgKey);
    const c = await connect(server.v2Url);
    c.send({ type: 'auth', token: grants.model, organisation: owner.clientId });
    expect(await c.next('authenticated')).toEqual({ type: 'authenticated', client_id: owner.orgId });
    c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'hi' }] });
    const done = await c.next('run_completed');
    expect(before - (await orgBalanceCredits(server.deps.db, owner.orgKey))).toBe(done.credits_debited);
    expect(done.credits_debited).toBeGreaterThan(0);
    c.ws.close();
  });

  it('a viewer cannot start a run', async () => {
    const viewer = await createUser(server);
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');
    const vt = await createApiToken(server, viewer, owner.orgKey);
    const c = await connect();
    c.send({ type: 'auth', token: vt.secret });
    await c.next('authenticated');
    c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'hi' }] });
    expect((await c.next('error')).code).toBe('viewer_cannot_spend');
    c.ws.close();
  });

  it('drops a peer that stops answering pings', async () => {
    runSocketOptions.set(server.deps, { heartbeatMs: 100 });
    try {
      const ws = new WebSocket(`${server.url.replace('http', 'ws')}/v1/runs/ws`, { autoPong: false });
      const closed = new Promise<number>((r) => ws.on('close', (code) => r(code)));
      await new Promise((r) => ws.once('open', r));
      // 1006: the server terminated the TCP connection without a close frame.
      expect(await closed).toBe(1006);
      // A peer that answers stays: by its third ping the server has checked two of its pongs.
      const c = await connect();
      let pings = 0;
      c.ws.on('ping', () => pings++);
      await eventually(() => pings >= 3 || c.ws.readyState !== WebSocket.OPEN, 5_000, 'three pings');
      expect(c.ws.readyState).toBe(WebSocket.OPEN);
      c.ws.close();
    } finally {
      runSocketOptions.delete(server.deps);
    }
  });

  it('ends the run when a tool_result does not come in time', async () => {
    runSocketOptions.set(server.deps, { toolTimeoutMs: 200 });
    try {
      const c = await connect();
      c.send({ type: 'auth', token: key });
      await c.next('authenticated');
      c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'read it' }] });
      await c.next('tool_call');
      expect(await c.next('error')).toMatchObject({ code: 'tool_timeout' });
      expect(await waitForNoLeases(server, owner.orgKey)).toBe(0);
      c.ws.close();
    } finally {
      runSocketOptions.delete(server.deps);
    }
  });

  it('revalidates membership before each model call of a run', async () => {
    const member = await createUser(server);
    await addMember(server, owner.orgKey, member.userId, 'member');
    const mt = await createApiToken(server, member, owner.orgKey);
    const c = await connect();
    c.send({ type: 'auth', token: mt.secret });
    await c.next('authenticated');
    c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'read it' }] });
    const t = await c.next('tool_call');
    await server.deps.db
      .delete(memberships)
      .where(and(eq(memberships.orgId, owner.orgKey), eq(memberships.userId, member.userId)));
    c.send({ type: 'tool_result', tool_call_id: t.tool_call_id, status: 'ok', result: 'x' });
    expect((await c.next('error')).code).toBe('not_a_member');
    c.ws.close();
  });

  it('a socket dropped mid-call aborts the run, bills what streamed and frees the lease', async () => {
    fake.chunkDelayMs = 15;
    fake.reply = () => ({ content: Array.from({ length: 300 }, (_, i) => `w${i}`).join(' ') });
    const before = await orgBalanceCredits(server.deps.db, owner.orgKey);
    const seen = fake.requests.length;
    const chunksBefore = fake.contentChunksSent;
    const c = await connect();
    c.send({ type: 'auth', token: key });
    await c.next('authenticated');
    c.send({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'write a lot' }] });
    await c.next('run_started');
    await eventually(() => fake.requests.length > seen, 15_000, 'the provider asked');
    await eventually(() => fake.contentChunksSent >= chunksBefore + 5, 15_000, 'some words streamed');
    c.ws.terminate();
    const rows = await eventuallyValue(
      usageRows,
      (rs) => rs.some((r) => r.description?.includes('aborted')),
      15_000,
      'a usage row for the aborted run',
    );
    const row = rows.find((r) => r.description?.includes('aborted'))!;
    expect(row.amount).toBeGreaterThan(0);
    expect(row.amount).toBeLessThan(600); // far below the 300 words it would have written
    expect(before - (await orgBalanceCredits(server.deps.db, owner.orgKey))).toBe(row.amount);
    expect(await waitForNoLeases(server, owner.orgKey)).toBe(0);
  });
});
