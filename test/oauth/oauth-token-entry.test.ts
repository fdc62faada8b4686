import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { issueApproval } from '../../oauth/token-issue.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import { tokenEntry } from '../../oauth/token-entry.js';
import { servedAheadOfExpress } from '../../src/http/entry-steps.js';

// The token request's own entry (oauth/token-entry.ts) serves a form-encoded POST /oauth/token without a
// query string, without Express; Express serves the same path with a query (or any other body) with the
// same steps. Here: which requests the entry takes, and that both ways answer alike, error for error,
// header for header. The Express way is reached by adding a query string, which the entry never takes.

let server: TestServer;
let user: TestUser;

beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
});
afterAll(async () => {
  await server?.close();
});

const PATH = '/oauth/token';
const FORM = { 'content-type': 'application/x-www-form-urlencoded' };

/** A fresh refresh token of svc-cli's platform grant, issued at `origin`. */
async function freshRefreshToken(origin = server.v2Url): Promise<string> {
  const issued = await issueApproval(server.deps, {
    clientId: 'svc-cli',
    userId: user.userId,
    orgKey: user.orgKey,
    issuer: origin,
    resources: ['platform'],
    named: null,
    auditOrigin: SYSTEM_ORIGIN,
  });
  return issued.top.refresh_token;
}

async function post(path: string, body: string, headers: Record<string, string> = FORM, base = server.v2Url) {
  const res = await fetch(`${base}${path}`, { method: 'POST', headers, body });
  const text = await res.text();
  let json: Record<string, unknown> | null = null;
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // not JSON
  }
  return { status: res.status, headers: res.headers, json };
}

/** What a client can tell of an answer, less what differs per call (tokens, request ids). */
const shape = (r: Awaited<ReturnType<typeof post>>) => ({
  status: r.status,
  error: r.json?.error ?? null,
  description: r.json?.error_description ?? null,
  fields: r.json ? Object.keys(r.json).sort() : null,
  headers: Object.fromEntries(
    [
      'content-type',
      'cache-control',
      'pragma',
      'access-control-allow-origin',
      'www-authenticate',
      'retry-after',
      'x-content-type-options',
    ].map((h) => [h, r.headers.get(h)]),
  ),
  requestId: r.headers.get('x-request-id') !== null,
});

const refreshBody = (rt: string, extra: Record<string, string> = {}) =>
  new URLSearchParams({
    grant_type: 'refresh_token',
    refresh_token: rt,
    client_id: 'svc-cli',
    ...extra,
  }).toString();

describe('the token request’s own entry', () => {
  it('takes a form-encoded POST /oauth/token without a query string, and hands everything else to the app', async () => {
    const reached: string[] = [];
    const app: RequestListener = (req, res) => {
      reached.push(`${req.method} ${req.url}`);
      res.statusCode = 299;
      res.end();
    };
    const listener = createServer(servedAheadOfExpress(server.deps, [tokenEntry(server.deps)], app));
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(listener.address() as AddressInfo).port}`;
    const send = (path: string, headers: Record<string, string>, method = 'POST') =>
      fetch(`${base}${path}`, {
        method,
        headers,
        ...(method === 'POST' ? { body: 'grant_type=refresh_token&refresh_token=x&client_id=svc-cli' } : {}),
      }).then(async (r) => (await r.arrayBuffer(), r.status));
    try {
      expect(await send(PATH, FORM)).toBe(400);
      expect(await send(PATH, { 'content-type': 'application/x-www-form-urlencoded; charset=utf-8' })).toBe(
        400,
      );
      expect(reached).toEqual([]);
      const others: [string, Record<string, string>, string?][] = [
        [`${PATH}?x=1`, FORM],
        [PATH, { 'content-type': 'application/json' }],
        [PATH, { 'content-type': 'text/plain' }],
        [`${PATH}/`, FORM],
        [PATH, {}, 'GET'],
        [PATH, {}, 'OPTIONS'],
        ['/oauth/revoke', FORM],
      ];
      for (const [path, headers, method] of others) expect(await send(path, headers, method)).toBe(299);
      expect(reached).toHaveLength(others.length);
    } finally {
      await new Promise((resolve) => listener.close(resolve));
    }
  });

  it('answers as the Express way does: refreshes, replays, bad grants, client authentication, bad bodies', async () => {
    const basic = (user: string, secret: string) => ({
      ...FORM,
      authorization: `Basic ${Buffer.from(`${user}:${secret}`).toString('base64')}`,
    });
    // Each case gets its own tokens on each way; `body` builds the form from them.
    const cases: [string, (rt: string) => string, Record<string, string>?, string?][] = [
      ['a refresh', (rt) => refreshBody(rt)],
      [
        'a refresh naming its resource',
        (rt) => refreshBody(rt, { resource: `${server.v2Url}/mcp/platform` }),
      ],
      ['a refresh naming another resource', (rt) => refreshBody(rt, { resource: `${server.v2Url}/v1` })],
      ['a refresh at another origin', (rt) => refreshBody(rt), FORM, server.lightUrl],
      ['an unknown refresh token', () => refreshBody(`srt_${'A'.repeat(43)}`)],
      ['another client', (rt) => refreshBody(rt, { client_id: 'client_unknown' })],
      [
        'no client_id',
        (rt) => new URLSearchParams({ grant_type: 'refresh_token', refresh_token: rt }).toString(),
      ],
      ['no grant_type', (rt) => new URLSearchParams({ refresh_token: rt }).toString()],
      ['grant_type twice', (rt) => `grant_type=refresh_token&grant_type=refresh_token&refresh_token=${rt}`],
      ['an unsupported grant_type', () => 'grant_type=password&username=a&password=b'],
      ['Basic and a body secret', (rt) => refreshBody(rt, { client_secret: 's' }), basic('svc-cli', 's')],
      ['Basic for a public client', (rt) => refreshBody(rt), basic('svc-cli', 'secret')],
      [
        'an unsupported authorization scheme',
        (rt) => refreshBody(rt),
        { ...FORM, authorization: 'Bearer x' },
      ],
      ['a NUL in the body', (rt) => refreshBody(rt, { scope: 'a\u0000b' })],
      ['a body over 100 KB', (rt) => refreshBody(rt, { pad: 'x'.repeat(110_000) })],
      ['a body that is not a form', () => '%%%'],
    ];
    for (const [name, body, headers = FORM, base = server.v2Url] of cases) {
      const entry = await post(PATH, body(await freshRefreshToken()), headers, base);
      const express = await post(`${PATH}?via=express`, body(await freshRefreshToken()), headers, base);
      expect(shape(entry), name).toEqual(shape(express));
      expect(entry.status, name).not.toBe(500);
    }
    // The answers themselves, so that "alike" cannot mean "alike and wrong".
    const ok = await post(PATH, refreshBody(await freshRefreshToken()));
    expect(ok.status).toBe(200);
    expect(ok.json).toMatchObject({ token_type: 'Bearer', expires_in: 900 });
    expect(ok.headers.get('cache-control')).toBe('no-store');
    expect(ok.headers.get('access-control-allow-origin')).toBe('*');
    expect((await post(PATH, 'grant_type=password')).json?.error).toBe('unsupported_grant_type');
    const wrongClient = await post(PATH, refreshBody(await freshRefreshToken()), basic('svc-cli', 'secret'));
    expect(wrongClient.status).toBe(401);
    expect(wrongClient.headers.get('www-authenticate')).toMatch(/^Basic /);
    expect((await post(PATH, refreshBody('x', { pad: 'x'.repeat(110_000) }))).status).toBe(413);
  });

  it('refuses a replayed refresh token after its successor moved on, and the replay revokes the family', async () => {
    for (const path of [PATH, `${PATH}?via=express`]) {
      const first = await freshRefreshToken();
      const second = await post(path, refreshBody(first));
      expect(second.status).toBe(200);
      const third = await post(path, refreshBody(second.json!.refresh_token as string));
      expect(third.status).toBe(200);
      // The successor was used: the first token coming back is a replay, not a race (oauth/refresh.ts).
      const replay = await post(path, refreshBody(first));
      expect(replay.status, path).toBe(400);
      expect(replay.json?.error, path).toBe('invalid_grant');
      // The whole family is revoked: the newest token of the chain no longer works either.
      const after = await post(path, refreshBody(third.json!.refresh_token as string));
      expect(after.json?.error, path).toBe('invalid_grant');
    }
  });
});
