import { createServer, request, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { entryTable } from '../../src/app.js';
import { createAuth } from '../../src/auth/principal.js';
import { servedAheadOfExpress } from '../../src/http/entry-steps.js';
import { SESSION_COOKIE } from '../../src/auth/session.js';

// The reads the route table serves ahead of Express (src/http/read-row.ts): a plain GET takes the row,
// every other request Express, with the same steps and read. Here: which requests the rows take, and that
// both ways answer alike, error for error, header for header. The Express way is reached by adding an
// empty query string (`?`), which no row takes and which changes nothing Express reads.

let server: TestServer;
let owner: TestUser;
let stranger: TestUser;
let viewer: TestUser;
let unverified: TestUser;
let token: string;

beforeAll(async () => {
  server = await startTestServer();
  owner = await createUser(server);
  stranger = await createUser(server);
  viewer = await createUser(server);
  unverified = await createUser(server, { verified: false });
  await addMember(server, owner.orgKey, viewer.userId, 'viewer');
  token = (await createApiToken(server, owner, owner.orgKey)).secret;
});
afterAll(async () => {
  await server?.close();
});

const HEADERS = [
  'content-type',
  'content-length',
  'etag',
  'cache-control',
  'www-authenticate',
  'retry-after',
  'x-content-type-options',
  'access-control-allow-origin',
  'vary',
];

/** One request with its path sent as written (fetch drops an empty query string's `?`). */
function call(path: string, headers: Record<string, string>, method = 'GET') {
  return new Promise<{ status: number; text: string; headers: Record<string, unknown>; requestId: boolean }>(
    (resolve, reject) => {
      const req = request(`${server.url}${path}`, { method, headers });
      req.on('error', reject);
      req.on('response', (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () =>
          resolve({
            status: res.statusCode!,
            text,
            headers: Object.fromEntries(HEADERS.map((h) => [h, res.headers[h] ?? null])),
            requestId: res.headers['x-request-id'] !== undefined,
          }),
        );
      });
      req.end();
    },
  );
}

/** The answer of the row (plain GET) and of Express (`?`) to the same request. */
async function bothWays(path: string, headers: Record<string, string>, method = 'GET') {
  const row = await call(path, headers, method);
  const express = await call(`${path}?`, headers, method);
  return { row, express };
}

const bearer = (credential: string) => ({ authorization: `Bearer ${credential}` });

describe('the reads ahead of Express', () => {
  it('answer as the Express routes do: bodies, headers and every error', async () => {
    const balance = (u: TestUser) => `/v1/clients/${u.clientId}/credits/balance`;
    const cases: [string, Record<string, string>][] = [
      ['/v1/owner/balance', bearer(owner.session)],
      ['/v1/owner/balance', { cookie: `${SESSION_COOKIE}=${owner.session}` }],
      ['/v1/owner/balance', {}],
      ['/v1/owner/balance', bearer('not-a-session')],
      ['/v1/owner/balance', { authorization: 'Basic abc' }],
      ['/v1/owner/balance', bearer(unverified.session)],
      ['/v1/owner/balance', bearer(token)],
      [balance(owner), bearer(owner.session)],
      [balance(owner), bearer(token)],
      [balance(owner), bearer(viewer.session)],
      [balance(owner), bearer(stranger.session)],
      [balance(stranger), bearer(token)],
      [balance(owner), {}],
      [`/v1/clients/${owner.orgKey}/credits/balance`, bearer(owner.session)],
      ['/v1/clients/cl_nonsense/credits/balance', bearer(owner.session)],
      ['/v1/clients', bearer(owner.session)],
      ['/v1/clients', bearer(viewer.session)],
      ['/v1/clients', bearer(token)],
      ['/v1/clients', {}],
      ['/v1/clients', { cookie: `${SESSION_COOKIE}=${owner.session}`, origin: 'https://evil.example' }],
      ['/v1/auth/verify', bearer(owner.session)],
      ['/v1/auth/verify', bearer('svc_nonsense')],
      ['/v1/auth/verify', {}],
    ];
    const statuses: number[] = [];
    for (const [path, headers] of cases) {
      const { row, express } = await bothWays(path, headers);
      expect({ path, sent: headers, ...row }).toEqual({ path, sent: headers, ...express });
      statuses.push(row.status);
    }
    // The cases reach every answer these routes give: 200, 401, 403 (wrong client, viewer, email).
    expect(new Set(statuses)).toEqual(new Set([200, 401, 403]));
    expect(statuses.filter((s) => s === 200).length).toBeGreaterThanOrEqual(8);
  });

  it('verify answers a token alike, its last use stamped either way', async () => {
    const { row, express } = await bothWays('/v1/auth/verify', bearer(token));
    expect(row.status).toBe(200);
    const shape = (r: typeof row) => ({
      ...r,
      text: Object.keys(JSON.parse(r.text) as object).sort(),
      headers: { ...r.headers, etag: String(r.headers.etag).startsWith('W/"'), 'content-length': null },
    });
    expect(shape(row)).toEqual(shape(express));
  });

  it('leave HEAD, OPTIONS, other methods, query strings and bodies to Express, which answers them as before', async () => {
    const reached: string[] = [];
    const app: RequestListener = (req, res) => {
      reached.push(`${req.method} ${req.url}`);
      res.statusCode = 299;
      res.end();
    };
    const auth = createAuth(server.deps);
    const listener = createServer(servedAheadOfExpress(server.deps, entryTable(server.deps, auth), app));
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(listener.address() as AddressInfo).port}`;
    const send = (path: string, init: RequestInit = {}) =>
      fetch(`${base}${path}`, { ...init, headers: { ...bearer(owner.session), ...init.headers } }).then(
        async (r) => (await r.arrayBuffer(), r.status),
      );
    const balance = `/v1/clients/${owner.clientId}/credits/balance`;
    try {
      for (const path of ['/v1/owner/balance', balance, '/v1/clients']) expect(await send(path)).toBe(200);
      expect(await send('/v1/auth/verify')).toBe(401);
      expect(reached).toEqual([]);
      const others: [string, RequestInit?][] = [
        ['/v1/owner/balance?x=1'],
        ['/v1/clients?limit=1'],
        [`${balance}?x=1`],
        ['/v1/owner/balance/'],
        ['/V1/OWNER/BALANCE'],
        [`/v1/clients/${encodeURIComponent(owner.clientId)}%2F/credits/balance`],
        ['/v1/owner/balance', { method: 'HEAD' }],
        ['/v1/owner/balance', { method: 'OPTIONS' }],
        ['/v1/clients', { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } }],
        [balance, { method: 'DELETE' }],
        ['/v1/owner/balance', { headers: { 'if-none-match': 'W/"x"' } }],
      ];
      for (const [path, init] of others)
        expect({ path, status: await send(path, init) }).toEqual({ path, status: 299 });
      // A GET with a body (fetch sends none): Express reads it, as it did.
      const withBody = await new Promise<number>((resolve, reject) => {
        const req = request(`${base}/v1/clients`, {
          method: 'GET',
          headers: { 'content-type': 'application/json', 'content-length': '2' },
        });
        req.on('response', (res) => (res.resume(), resolve(res.statusCode!)));
        req.on('error', reject);
        req.end('{}');
      });
      expect(withBody).toBe(299);
      expect(reached).toHaveLength(others.length + 1);
    } finally {
      await new Promise((resolve) => listener.close(resolve));
    }
  });

  it('answer HEAD, a query string and a conditional GET through Express as before', async () => {
    const session = bearer(owner.session);
    const get = await call('/v1/owner/balance', session);
    const head = await call('/v1/owner/balance', session, 'HEAD');
    expect(head).toEqual({ ...get, text: '' });
    const conditional = { ...session, 'if-none-match': String(get.headers.etag) };
    const { row, express } = await bothWays('/v1/owner/balance', conditional);
    expect(row).toEqual(express);
    const page = await call('/v1/clients?limit=0', session);
    expect(page.status).toBe(400);
    expect(JSON.parse(page.text)).toMatchObject({ detail: { code: 'VALIDATION_ERROR' } });
    expect((await call('/v1/owner/balance', session, 'PUT')).status).toBe(404);
  });
});
