import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import { modelSuite } from '../helpers/model-suite.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import type { TestServer } from '../helpers/server.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { createAuth } from '../../src/auth/principal.js';
import { modelRouteTable } from '../../src/models/entry.js';
import { servedAheadOfExpress } from '../../src/http/entry-steps.js';
import { openAiError, readJson, type OpenAiError } from '../helpers/json.js';

// The chat call's own entry (src/models/entry.ts, src/http/entry-steps.ts) serves POST /v1/chat/completions without a query
// string, without Express; Express serves a chat call with a query with the same steps. Here: which
// requests the entry takes, and that both ways answer alike, error for error. The Express way is reached
// with the same credential by naming its own org in the query (`?org_id=`), which the entry never takes.

let server: TestServer;
let owner: TestUser;
let key: string;
const suite = modelSuite();
beforeAll(() => void ({ server, owner, key } = suite));

const PATH = '/v1/chat/completions';
const byExpress = () => `${PATH}?org_id=org_${owner.orgKey}`;
const okBody = JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'Say hello' }] });

async function post(
  path: string,
  body: string,
  headers: Record<string, string> = {},
  token: string | null = key,
  base = server.url,
) {
  const res = await fetch(`${base}${path}`, {
    method: 'POST',
    headers: {
      ...(token === null ? {} : { authorization: `Bearer ${token}` }),
      'content-type': 'application/json',
      ...headers,
    },
    body,
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text) as unknown;
  } catch {
    // not JSON
  }
  return { status: res.status, headers: res.headers, json };
}

/** What a caller can tell of an answer, less what differs per call (ids, timings). */
const shape = (r: Awaited<ReturnType<typeof post>>) => ({
  status: r.status,
  contentType: r.headers.get('content-type'),
  error: (r.json as Partial<OpenAiError> | null)?.error ?? null,
  shouldRetry: r.headers.get('x-should-retry'),
  requestId: r.headers.get('x-request-id') !== null,
});

describe('the chat call’s own entry', () => {
  it('takes POST /v1/chat/completions without a query string, whatever the credential, and hands everything else to the app', async () => {
    const reached: string[] = [];
    const app: RequestListener = (req, res) => {
      reached.push(`${req.method} ${req.url}`);
      res.statusCode = 299;
      res.end();
    };
    const listener = createServer(
      servedAheadOfExpress(server.deps, modelRouteTable(server.deps, createAuth(server.deps)), app),
    );
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(listener.address() as AddressInfo).port}`;
    const send = (path: string, headers: Record<string, string>, method = 'POST') =>
      fetch(`${base}${path}`, {
        method,
        headers: { 'content-type': 'application/json', ...headers },
        ...(method === 'POST' ? { body: okBody } : {}),
      }).then(async (r) => (await r.arrayBuffer(), r.status));
    try {
      expect(await send(PATH, { authorization: `Bearer ${key}` })).toBe(200);
      expect(
        await send(PATH, { authorization: `Bearer ${key}`, 'x-svc-organisation': `org_${owner.orgKey}` }),
      ).toBe(200);
      expect(await send(PATH, { authorization: 'Bearer eyJhbGciOiJFUzI1NiJ9.e30.sig' })).toBe(401);
      expect(await send(PATH, { authorization: 'Bearer svc_not-a-token' })).toBe(401);
      expect(await send(PATH, {})).toBe(401);
      expect(reached).toEqual([]);
      const others: [string, Record<string, string>, string?][] = [
        [byExpress(), { authorization: `Bearer ${key}` }],
        [`${PATH}?x=1`, { authorization: `Bearer ${key}` }],
        [`${PATH}/`, { authorization: `Bearer ${key}` }],
        [PATH, { authorization: `Bearer ${key}` }, 'GET'],
        ['/v1/models', { authorization: `Bearer ${key}` }, 'GET'],
      ];
      for (const [path, headers, method] of others) expect(await send(path, headers, method)).toBe(299);
      expect(reached).toHaveLength(others.length);
    } finally {
      await new Promise((resolve) => listener.close(resolve));
    }
  });

  it('answers as the Express way does: success, bad bodies, bad credentials, grants, viewers', async () => {
    const viewer = await createUser(server);
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');
    const viewerKey = (await createApiToken(server, viewer, owner.orgKey)).secret;
    const unknownKey = `svc_${'A'.repeat(key.length - 4)}`;
    const grants = await issueTestGrants(server, owner, {
      orgKey: owner.orgKey,
      resources: ['model', 'platform'],
      origin: server.v2Url,
    });
    const ownOrg = { 'x-svc-organisation': `org_${owner.orgKey}` };
    const cases: [string, string, Record<string, string>, (string | null)?, string?][] = [
      ['a call', okBody, {}],
      ['a body that is not JSON', '{"messages": [', {}],
      ['a NUL in the body', JSON.stringify({ messages: [{ role: 'user', content: 'a\u0000b' }] }), {}],
      ['no messages', JSON.stringify({ model: 'x' }), {}],
      [
        'stream_options without stream',
        JSON.stringify({
          messages: [{ role: 'user', content: 'hi' }],
          stream_options: { include_usage: true },
        }),
        {},
      ],
      [
        'a body over 10 MB',
        JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(10_500_000) }] }),
        {},
      ],
      ['an unsupported charset', okBody, { 'content-type': 'application/json; charset=latin-9' }],
      ['a body that is not declared JSON', okBody, { 'content-type': 'text/plain' }],
      ['an unknown token', okBody, {}, unknownKey],
      ['an unknown token and a body that is not JSON', '{', {}, unknownKey],
      ['an unknown token and a JSON body that is not a chat request', '{}', {}, unknownKey],
      ['a viewer', okBody, {}, viewerKey],
      ['an svc_ token naming its own org in the header', okBody, ownOrg],
      ['an svc_ token naming another org', okBody, { 'x-svc-organisation': 'org_someoneelse' }],
      ['no credential', okBody, {}, null],
      ['a session as a bearer', okBody, {}, owner.session],
      ['a session cookie', okBody, { cookie: `__Host-svc_session=${owner.session}` }, null],
      ['a model grant on its origin', okBody, {}, grants.model!, server.v2Url],
      ['a model grant naming its org in the header', okBody, ownOrg, grants.model!, server.v2Url],
      ['a model grant and a bad body', JSON.stringify({ model: 'x' }), {}, grants.model!, server.v2Url],
      ['a model grant on another origin', okBody, {}, grants.model!, server.url],
      ['a platform grant', okBody, {}, grants.platform!, server.v2Url],
    ];
    for (const [name, body, headers, token, base] of cases) {
      const entry = await post(PATH, body, headers, token, base);
      const express = await post(byExpress(), body, headers, token, base);
      expect(shape(entry), name).toEqual(shape(express));
      expect(entry.status, name).not.toBe(500);
    }
    // The statuses themselves, so that "alike" cannot mean "alike and wrong".
    expect(readJson(openAiError, (await post(PATH, '{"messages": [', {})).json).error).toMatchObject({
      code: 'validation_error',
      type: 'invalid_request_error',
    });
    expect((await post(PATH, okBody, {}, unknownKey)).status).toBe(401);
    // The credential is judged before the body is read: a bad body with a bad token is 401.
    expect((await post(PATH, '{', {}, unknownKey)).status).toBe(401);
    expect((await post(PATH, '{}', {}, unknownKey)).status).toBe(401);
    expect(readJson(openAiError, (await post(PATH, okBody, {}, viewerKey)).json).error.code).toBe(
      'viewer_cannot_spend',
    );
    expect((await post(PATH, okBody, {}, grants.model, server.v2Url)).status).toBe(200);
    expect((await post(PATH, okBody, {}, grants.model, server.url)).status).toBe(401);
    expect((await post(PATH, okBody, {}, null)).status).toBe(401);
    const big = await post(
      PATH,
      JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(10_500_000) }] }),
    );
    expect(big.status).toBe(413);
  });

  it('echoes a well-formed x-request-id and names the call in x-svc-request-id', async () => {
    const res = await post(PATH, okBody, { 'x-request-id': 'trace-123' });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-request-id')).toBe('trace-123');
    expect(res.headers.get('x-svc-request-id')).toMatch(/^req_/);
    expect(res.headers.get('x-svc-outcome')).toBeTruthy();
  });
});
