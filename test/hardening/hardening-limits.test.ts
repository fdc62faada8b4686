import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { authenticateRunSocket, openRunSocket } from '../helpers/run-socket.js';
import { setOrgBalance } from '../helpers/billing.js';
import { rawRequest } from '../helpers/raw-http.js';
import { jsonNestsDeeperThan, MAX_JSON_DEPTH } from '../../src/http/json-body.js';
import { detailError, matching, oauthError, openAiError, readJson } from '../helpers/json.js';
import { eventually, eventuallyValue } from '../helpers/eventually.js';

// Request-level limits that need no frozen event loop to show (those are in
// hardening-event-loop.test.ts, against a server in a child process).

let server: TestServer;
let owner: TestUser;
let key: string;
let platformGrant: string;
beforeAll(async () => {
  server = await startTestServer();
  owner = await createUser(server);
  key = (await createApiToken(server, owner, owner.orgKey)).secret;
  await setOrgBalance(server, owner.orgKey, 100_000);
  platformGrant = (
    await issueTestGrants(server, owner, {
      orgKey: owner.orgKey,
      resources: ['platform'],
      origin: server.v2Url,
    })
  ).platform!;
});
afterAll(async () => {
  await server?.close();
});

/** `levels` arrays one inside the other. */
const nestedArray = (levels: number): unknown => {
  let v: unknown = [];
  for (let i = 1; i < levels; i++) v = [v];
  return v;
};
const json = { 'content-type': 'application/json' };

describe('JSON nesting limit on every body', () => {
  it('finds the depth in one pass, ignoring brackets inside strings and escaped quotes', () => {
    const depthOf = (text: string) => {
      for (let max = 0; ; max++) if (!jsonNestsDeeperThan(Buffer.from(text), max)) return max;
    };
    expect(depthOf('{}')).toBe(1);
    expect(depthOf('[[1],{"a":[2]}]')).toBe(3);
    expect(depthOf('{"a":"[[[[{{{{"}')).toBe(1);
    expect(depthOf('{"a":"\\"[[[[","b":[1]}')).toBe(2);
    expect(depthOf('{"a":"\\\\","b":[[1]]}')).toBe(3);
    expect(depthOf('["\\\\\\"[[[["]')).toBe(1);
    expect(depthOf(JSON.stringify(nestedArray(MAX_JSON_DEPTH)))).toBe(MAX_JSON_DEPTH);
  });

  const surfaces: {
    name: string;
    path: string;
    base: () => string;
    headers: () => Record<string, string>;
    body: (extra: unknown) => unknown;
    refused: (r: { status: number; json: unknown }) => void;
  }[] = [
    {
      name: 'chat (OpenAI error)',
      path: '/v1/chat/completions',
      base: () => server.url,
      headers: () => ({ authorization: `Bearer ${key}` }),
      body: (extra) => ({ model: 'x', messages: [{ role: 'user', content: 'hi' }], metadata: { extra } }),
      refused: (r) =>
        expect(readJson(openAiError, r.json).error).toMatchObject({
          code: 'validation_error',
          type: 'invalid_request_error',
          message: `(root): nested deeper than ${MAX_JSON_DEPTH} levels`,
        }),
    },
    {
      name: 'chat with a query string (Express way)',
      path: '/v1/chat/completions?org_id=OWN_ORG',
      base: () => server.url,
      headers: () => ({ authorization: `Bearer ${key}` }),
      body: (extra) => ({ model: 'x', messages: [{ role: 'user', content: 'hi' }], metadata: { extra } }),
      refused: (r) => expect(readJson(openAiError, r.json).error).toMatchObject({ code: 'validation_error' }),
    },
    {
      name: '/v1 account routes (detail envelope)',
      path: '/v1/login',
      base: () => server.url,
      headers: () => ({}),
      body: (extra) => ({ email: owner.email, password: 'wrong', extra }),
      refused: (r) =>
        expect(readJson(detailError, r.json).detail).toMatchObject({
          code: 'VALIDATION_ERROR',
          errors: [{ path: '(root)', message: `nested deeper than ${MAX_JSON_DEPTH} levels` }],
        }),
    },
    {
      name: '/oauth (RFC 6749 error)',
      path: '/oauth/register',
      base: () => server.url,
      headers: () => ({}),
      body: (extra) => ({ redirect_uris: ['http://127.0.0.1:9/cb'], extra }),
      refused: (r) => expect(r.json).toMatchObject({ error: 'invalid_request' }),
    },
    {
      name: '/mcp/platform (JSON-RPC error)',
      path: '/mcp/platform',
      base: () => server.v2Url,
      headers: () => ({
        authorization: `Bearer ${platformGrant}`,
        accept: 'application/json, text/event-stream',
      }),
      body: (extra) => ({ jsonrpc: '2.0', id: 1, method: 'ping', params: { _meta: { extra } } }),
      refused: (r) =>
        expect(r.json).toMatchObject({
          jsonrpc: '2.0',
          error: { message: matching(/nested deeper/) },
        }),
    },
  ];

  for (const s of surfaces) {
    it(`${s.name}: 400 one level beyond ${MAX_JSON_DEPTH}, read as usual at ${MAX_JSON_DEPTH}`, async () => {
      // The body's own levels (object, field, …) count too: fill up to exactly the limit.
      const text = JSON.stringify(s.body('__here__'));
      const ownLevels = [...text.slice(0, text.indexOf('"__here__"'))].reduce(
        (d, c) => (c === '{' || c === '[' ? d + 1 : c === '}' || c === ']' ? d - 1 : d),
        0,
      );
      const room = MAX_JSON_DEPTH - ownLevels;
      const send = (levels: number) =>
        rawRequest(s.base(), 'POST', s.path.replace('OWN_ORG', owner.orgId), {
          headers: { ...json, ...s.headers() },
          body: JSON.stringify(s.body(nestedArray(levels))),
        });
      const over = await send(room + 1);
      expect(over.status).toBe(400);
      s.refused(over);
      const at = await send(room);
      expect(at.text).not.toMatch(/nested deeper/);
      expect(at.status).not.toBe(500);
    });
  }
});

describe('a body that stops arriving', () => {
  const IDLE_MS = 1_000;
  let idle: TestServer;
  let fake: FakeUpstream;
  let idleKey: string;
  beforeAll(async () => {
    fake = await startFakeUpstream();
    idle = await startTestServer({ env: fake.env({ REQUEST_BODY_IDLE_TIMEOUT_MS: String(IDLE_MS) }) });
    const user = await createUser(idle);
    idleKey = (await createApiToken(idle, user, user.orgKey)).secret;
    await setOrgBalance(idle, user.orgKey, 100_000);
  });
  afterAll(async () => {
    await idle?.close();
    await fake?.close();
  });

  /** A raw connection that sends a request's head and `first` bytes of a longer body, then nothing. */
  function trickle(path: string, declared: number, first: string) {
    const socket = connect(idle.port, '127.0.0.1');
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (c: string) => (received += c));
    socket.on('error', () => {});
    const closed = new Promise<string>((resolve) => socket.on('close', () => resolve(received)));
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1:${idle.port}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${declared}\r\n\r\n${first}`,
    );
    return { socket, closed };
  }

  it('answers 408 and closes connections whose bodies stall; /healthz meanwhile', async () => {
    const paths = ['/v1/login', '/v1/chat/completions', '/oauth/token', '/mcp/platform'];
    const stalled = Array.from({ length: 40 }, (_, i) => trickle(paths[i % paths.length]!, 1000, '{"a'));
    try {
      expect((await fetch(`${idle.url}/healthz`)).status).toBe(200);
      const answers = await Promise.all(stalled.map((s) => s.closed));
      const bodyOf = (text: string): unknown => JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));
      answers.forEach((text, i) => {
        const path = paths[i % paths.length]!;
        // Every connection was closed (the await above); how it was answered depends on the route: a chat
        // or MCP call without a credential is refused before its body is read (401), then the rest of
        // its body is drained under the same limit.
        if (path === '/v1/login')
          expect(readJson(detailError, bodyOf(text)).detail.code).toBe('REQUEST_TIMEOUT');
        if (path === '/oauth/token') expect(readJson(oauthError, bodyOf(text)).error).toBe('invalid_request');
        expect(text).toMatch(
          path === '/v1/login' || path === '/oauth/token' ? /^HTTP\/1\.1 408 / : /^HTTP\/1\.1 401 /,
        );
      });
    } finally {
      for (const s of stalled) s.socket.destroy();
    }
  });

  it('lets a slow body through while bytes keep coming, and never cuts a streamed answer', async () => {
    const body = JSON.stringify({ model: 'x', stream: true, messages: [{ role: 'user', content: 'hi' }] });
    const socket = connect(idle.port, '127.0.0.1');
    let received = '';
    socket.setEncoding('utf8');
    socket.on('data', (c: string) => (received += c));
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${idle.port}\r\nAuthorization: Bearer ${idleKey}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`,
    );
    // The body in 5 pieces, IDLE_MS / 2 apart: longer than IDLE_MS in all, never idle that long.
    fake.chunkDelayMs = IDLE_MS / 2; // and the answer streams for longer than IDLE_MS too
    fake.reply = () => ({ content: 'one two three four five' });
    const step = Math.ceil(body.length / 5);
    for (let i = 0; i < body.length; i += step) {
      socket.write(body.slice(i, i + step));
      await new Promise((r) => setTimeout(r, IDLE_MS / 2)); // the scenario: a client sending its body slowly
    }
    await closed;
    expect(received).toMatch(/^HTTP\/1\.1 200/);
    expect(received).toContain('data: [DONE]');
    for (const word of ['one', 'two', 'three', 'four', 'five']) expect(received).toContain(word);
  });
});

describe('run sockets: nothing before auth, caps per organization and user', () => {
  let capped: TestServer;
  let a: TestUser;
  let aKey: string;
  let bKey: string;
  beforeAll(async () => {
    capped = await startTestServer({ env: { RUN_SOCKETS_PER_ORG: '3', RUN_SOCKETS_PER_USER: '2' } });
    a = await createUser(capped);
    aKey = (await createApiToken(capped, a, a.orgKey)).secret;
    const b = await createUser(capped);
    await addMember(capped, a.orgKey, b.userId, 'member');
    bKey = (await createApiToken(capped, b, a.orgKey)).secret;
  });
  afterAll(async () => {
    await capped?.close();
  });

  const socket = () => openRunSocket(capped.url);
  const authenticate = (token: string) => authenticateRunSocket(capped.url, token);

  it('answers no WebSocket ping before auth, and pings after it', async () => {
    const s = await socket();
    s.ws.ping();
    s.ws.send(JSON.stringify({ type: 'auth', token: aKey }));
    expect((await s.frame()).type).toBe('authenticated');
    // The ping was read before the auth frame (one connection, in order) and got nothing.
    expect(s.pongs()).toBe(0);
    s.ws.ping();
    await eventually(() => s.pongs() > 0, 5_000, 'a pong');
    s.ws.close();
    await s.closed;
  });

  it('closes 4401 on a JSON ping before auth, without a pong', async () => {
    const s = await socket();
    s.ws.send('{"type":"ping"}');
    const answer = await s.frame();
    expect(answer).toMatchObject({ type: 'error', code: 'unauthenticated' });
    expect(await s.closed).toBe(4401);
  });

  it('refuses an auth over the per-user or per-organization cap (4429), and frees a place on close', async () => {
    const a1 = await authenticate(aKey);
    const a2 = await authenticate(aKey);
    expect([a1.answer.type, a2.answer.type]).toEqual(['authenticated', 'authenticated']);
    const a3 = await authenticate(aKey);
    expect(a3.answer).toMatchObject({ type: 'error', code: 'too_many_sockets' });
    expect(await a3.closed).toBe(4429);
    // Another member of the same organization: the user cap is theirs, the org cap shared (3).
    const b1 = await authenticate(bKey);
    expect(b1.answer.type).toBe('authenticated');
    const b2 = await authenticate(bKey);
    expect(b2.answer).toMatchObject({ type: 'error', code: 'too_many_sockets' });
    expect(await b2.closed).toBe(4429);
    a1.ws.close();
    await a1.closed;
    // The server counts the socket out when its close arrives; a new auth may race it, so retry briefly.
    const b3 = await eventuallyValue(
      () => authenticate(bKey),
      (s) => s.answer.type === 'authenticated',
      5_000,
      'a place freed',
    );
    expect(b3.answer.type).toBe('authenticated');
    for (const s of [a2, b1, b3]) s.ws.close();
  });
});

describe('provider error text is not relayed', () => {
  let relay: TestServer;
  let provider: Server;
  let providerError: unknown;
  let relayKey: string;
  beforeAll(async () => {
    provider = createServer((req, res) => {
      req.resume();
      req.on('end', () =>
        res
          .writeHead(400, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: providerError })),
      );
    });
    await new Promise<void>((r) => provider.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(provider.address() as AddressInfo).port}/v1`;
    relay = await startTestServer({
      env: { MODEL_UPSTREAM_URL: url, MODEL_UPSTREAM_KEY: 'sk-proj-relay-secret-0123', MODEL_ID: 'm' },
    });
    const user = await createUser(relay);
    relayKey = (await createApiToken(relay, user, user.orgKey)).secret;
    await setOrgBalance(relay, user.orgKey, 100_000);
  });
  afterAll(async () => {
    await relay?.close();
    provider?.closeAllConnections();
    await new Promise((r) => provider?.close(r));
  });

  const LEAKY =
    'This model maximum context length is 8192 tokens. Org org-Qx7Secret42 at api.provider.example, key sk-proj-****9xYz';
  const ask = () =>
    new OpenAI({ apiKey: relayKey, baseURL: `${relay.url}/v1`, maxRetries: 0 }).chat.completions
      .create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
      .then(
        () => null,
        (e: unknown) => e as InstanceType<typeof OpenAI.APIError>,
      );

  it('answers a fixed message with the provider’s param and code only', async () => {
    providerError = {
      message: LEAKY,
      type: 'invalid_request_error',
      param: 'messages',
      code: 'context_length_exceeded',
      organization: 'org-Qx7Secret42',
    };
    const err = await ask();
    expect(err?.status).toBe(400);
    expect(err?.error).toEqual({
      message: 'the model provider rejected the request',
      type: 'invalid_request_error',
      code: 'context_length_exceeded',
      param: 'messages',
    });
    expect(JSON.stringify(err?.error)).not.toMatch(/Qx7Secret42|provider\.example|9xYz/);
  });

  it('drops a param or code that is not a plain identifier, and a message-only error', async () => {
    providerError = { message: LEAKY, param: 'messages at org-Qx7Secret42', code: 'x'.repeat(65) };
    let err = await ask();
    expect(err?.error).toMatchObject({
      message: 'the model provider rejected the request',
      code: 'upstream_rejected',
      param: null,
    });
    providerError = LEAKY;
    err = await ask();
    expect(err?.error).toMatchObject({
      message: 'the model provider rejected the request',
      code: 'upstream_rejected',
    });
    expect(JSON.stringify(err?.error)).not.toMatch(/Qx7Secret42|provider\.example|9xYz/);
  });
});
