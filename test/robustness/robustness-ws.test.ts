import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import type { ServerFrame } from '../../src/runs/frames.js';
import { at, parseAs } from '../helpers/json.js';

// The run WebSocket under hostile frames (CONTRACT §3, §9): every bad frame is answered with an `error`
// frame naming the client's mistake (never `internal`), and the socket keeps serving afterwards.

let server: TestServer;
let modelToken: string;
beforeAll(async () => {
  server = await startTestServer();
  const user = await createUser(server);
  modelToken = (
    await issueTestGrants(server, user, { orgKey: user.orgKey, resources: ['model'], origin: server.url })
  ).model!;
});
afterAll(async () => {
  await server?.close();
});

/** A socket with a queue of received frames. */
async function open() {
  const ws = new WebSocket(`${server.url.replace('http', 'ws')}/v1/runs/ws`);
  const frames: ServerFrame[] = [];
  const waiters: ((f: ServerFrame) => void)[] = [];
  ws.on('message', (data) => {
    const f = parseAs<ServerFrame>((data as Buffer).toString());
    const w = waiters.shift();
    if (w) w(f);
    else frames.push(f);
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  const next = () =>
    frames.length
      ? Promise.resolve(frames.shift()!)
      : new Promise<ServerFrame>((resolve, reject) => {
          const t = setTimeout(() => reject(new Error('no frame within 5 s')), 5000);
          waiters.push((f) => {
            clearTimeout(t);
            resolve(f);
          });
        });
  return { ws, next, closed, send: (v: string | Buffer) => ws.send(v) };
}

const HOSTILE_FRAMES: (string | Buffer)[] = [
  'not json',
  '',
  'null',
  '[]',
  '1e309',
  '{"type":"nope"}',
  '{"type":"start"}',
  '{"type":"start","agent":"default","messages":"hi"}',
  '{"type":"start","agent":"default","messages":[]}',
  '{"type":"start","agent":"no-such-agent\\u0000","messages":[{"role":"user","content":"x"}]}',
  '{"type":"start","agent":"default","messages":[{"role":"wizard","content":"x"}]}',
  '{"type":"start","agent":"default","messages":[{"role":"user","content":5}]}',
  `{"type":"start","agent":"${'a'.repeat(100_000)}","messages":[{"role":"user","content":"x"}]}`,
  '{"type":"tool_result","tool_call_id":"nope","result":1e309}',
  '{"type":"tool_result","tool_call_id":"\\u0000"}',
  '{"type":"cancel"}',
  '{"type":"auth","token":"again"}',
  Buffer.from([0xff, 0x00, 0xfe]),
];

describe('run socket: hostile frames', () => {
  it('before authentication: a bad first frame closes 4401 with an error frame, never internal', async () => {
    for (const first of [
      'not json',
      '{"type":"start","agent":"default","messages":[{"role":"user","content":"x"}]}',
      '{"type":"auth","token":"\\u0000"}',
      `{"type":"auth","token":"${'x'.repeat(5000)}"}`,
      '{"type":"auth","token":"svc_x","organisation":"\\u0000"}',
    ]) {
      const c = await open();
      c.send(first);
      const frame = await c.next();
      expect(frame.type, first.slice(0, 60)).toBe('error');
      expect(at(frame, 'code'), first.slice(0, 60)).not.toBe('internal');
      // Closed for the frame, not by the 10 s auth deadline (whose close says 'authentication timeout').
      const { code, reason } = await c.closed;
      expect({ code, timedOut: reason === 'authentication timeout' }, first.slice(0, 60)).toEqual({
        code: 4401,
        timedOut: false,
      });
    }
  });

  it('after authentication: every bad frame gets a client error frame and the socket keeps serving', async () => {
    const c = await open();
    c.send(JSON.stringify({ type: 'auth', token: modelToken }));
    expect((await c.next()).type).toBe('authenticated');
    for (const frame of HOSTILE_FRAMES) {
      c.send(frame);
      const answer = await c.next();
      const what = String(frame).slice(0, 80);
      expect(answer.type, what).toBe('error');
      expect(at(answer, 'code'), what).not.toBe('internal');
      c.send('{"type":"ping"}');
      expect((await c.next()).type, `alive after ${what}`).toBe('pong');
    }
    c.ws.close();
    expect((await c.closed).code).toBe(1005);
  });

  it('a run whose message holds a NUL character finishes or is refused, never an internal error', async () => {
    const c = await open();
    c.send(JSON.stringify({ type: 'auth', token: modelToken }));
    expect((await c.next()).type).toBe('authenticated');
    c.send(
      JSON.stringify({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'a\u0000b' }] }),
    );
    const seen: ServerFrame[] = [];
    for (let i = 0; i < 50; i++) {
      const f = await c.next();
      seen.push(f);
      // The local model asks for tools: answer each with a NUL-bearing result too.
      if (f.type === 'tool_call')
        c.send(JSON.stringify({ type: 'tool_result', tool_call_id: f.tool_call_id, result: 'x\u0000y' }));
      if (f.type === 'error' || f.type === 'run_completed') break;
    }
    const last = seen.at(-1)!;
    expect(['run_completed', 'error'], JSON.stringify(seen.slice(-2))).toContain(last.type);
    expect(at(last, 'code'), JSON.stringify(last)).not.toBe('internal');
    c.ws.close();
  });
});
