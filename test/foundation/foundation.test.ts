import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer, PRODUCTION_ENV } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createApiToken, createUser } from '../helpers/fixtures.js';
import { loadConfig, ConfigError } from '../../src/config.js';
import { newId, parseOrgId, randomToken } from '../../src/ids.js';
import { anyOf, detailError, readJson } from '../helpers/json.js';

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

describe('process surface (CONTRACT §1, §3)', () => {
  it('answers /healthz and /readyz', async () => {
    const api = client(server.url);
    expect((await api.get('/healthz')).body).toEqual({ status: 'ok' });
    const ready = await api.get('/readyz');
    expect(ready.status).toBe(200);
  });

  it('gives unknown routes 404 NOT_FOUND in the error envelope, with a request id', async () => {
    const res = await client(server.url).get('/v1/does-not-exist');
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ detail: { code: 'NOT_FOUND', message: anyOf(String) } });
    expect(res.headers.get('x-request-id')).toMatch(/.+/);
  });

  it('echoes a sane incoming request id and replaces a hostile one', async () => {
    const api = client(server.url);
    expect(
      (await api.get('/healthz', { headers: { 'x-request-id': 'abc-123' } })).headers.get('x-request-id'),
    ).toBe('abc-123');
    expect(
      (await api.get('/healthz', { headers: { 'x-request-id': 'a b\tc' } })).headers.get('x-request-id'),
    ).not.toBe('a b\tc');
  });

  it('answers malformed JSON with 400 VALIDATION_ERROR and its detail.errors (CONTRACT §3), never 500', async () => {
    const res = await client(server.url).post('/v1/clients', '{"name":', {});
    expect(res.status).toBe(400);
    expect(readJson(detailError, res.body).detail).toEqual({
      code: 'VALIDATION_ERROR',
      message: '(root): request body is not valid JSON',
      errors: [{ path: '(root)', message: 'request body is not valid JSON' }],
    });
  });

  it('refuses bodies over the size limit with 413', async () => {
    const res = await client(server.url).post('/v1/clients', { name: 'x'.repeat(2 * 1024 * 1024) });
    expect(res.status).toBe(413);
    expect(readJson(detailError, res.body).detail.code).toBe('PAYLOAD_TOO_LARGE');
  });

  it('serves the dev mail outbox only in dev mode', async () => {
    expect(
      (await client(server.url).get('/dev/mail', { query: { to: 'nobody@example.test' } })).body,
    ).toEqual({ data: [] });
    const prod = await startTestServer({ env: PRODUCTION_ENV });
    try {
      expect((await client(prod.url).get('/dev/mail', { query: { to: 'x@example.test' } })).status).toBe(404);
    } finally {
      await prod.close();
    }
  });
});

describe('configuration (CONTRACT §1)', () => {
  it('defaults every origin to http://localhost:$PORT', () => {
    const c = loadConfig({ PORT: '9000' });
    expect([c.baseUrl, c.v2Url, c.lightUrl]).toEqual(Array(3).fill('http://localhost:9000'));
    expect(c.devMode).toBe(true);
    expect(loadConfig(PRODUCTION_ENV).devMode).toBe(false);
  });

  it('names the variable when a value is bad', () => {
    expect(() => loadConfig({ PORT: 'eighty' })).toThrow(ConfigError);
    expect(() => loadConfig({ PORT: 'eighty', DATABASE_URL: 'mysql://x' })).toThrow(
      /PORT[\s\S]*DATABASE_URL/,
    );
  });
});

describe('identifiers (CONTRACT §2)', () => {
  it('accepts both spellings of an organization id and nothing else', () => {
    expect(parseOrgId('client_abc234')).toBe('abc234');
    expect(parseOrgId('org_abc234')).toBe('abc234');
    expect(parseOrgId('abc234')).toBeNull();
    expect(parseOrgId('user@example.com')).toBeNull();
  });

  it('random parts are 128 bits of base32 and never repeat, across many refills of the random pool', () => {
    const ids = Array.from({ length: 5_000 }, () => newId('req'));
    expect(ids.every((id) => /^req_[a-z2-7]{26}$/.test(id))).toBe(true);
    expect(new Set(ids).size).toBe(ids.length);
    // Odd sizes straddle the pool's refill boundary; their tokens are still distinct.
    const odd = Array.from({ length: 2_000 }, () => randomToken(7));
    expect(odd.every((t) => /^[a-z2-7]{12}$/.test(t))).toBe(true);
    expect(new Set(odd).size).toBe(odd.length);
  });
});

describe('credentials', () => {
  it('stores API tokens only as an HMAC', async () => {
    const user = await createUser(server);
    const { secret, id } = await createApiToken(server, user, user.orgKey);
    expect(secret).toMatch(/^svc_[A-Za-z0-9_-]{43}$/);
    const rows = await server.deps.db.query.apiTokens.findMany();
    const row = rows.find((r) => r.id === id)!;
    expect(row.tokenHash).not.toContain(secret.slice(4));
    expect(JSON.stringify(rows)).not.toContain(secret);
  });
});

describe('CSRF on cookie-authenticated unsafe requests (CONTRACT §4)', () => {
  const cookieOf = (session: string) => `__Host-svc_session=${session}`;

  it('accepts same-origin signals, including Origin: null from a no-referrer page', async () => {
    const user = await createUser(server);
    const api = client(server.url);
    const bySite = await api.post(
      '/v1/clients',
      { name: 'a' },
      {
        cookie: cookieOf(user.session),
        headers: { 'sec-fetch-site': 'same-origin', origin: 'null' },
      },
    );
    expect(bySite.status).toBe(200);
    const byOrigin = await api.post(
      '/v1/clients',
      { name: 'b' },
      { cookie: cookieOf(user.session), headers: { origin: server.url } },
    );
    expect(byOrigin.status).toBe(200);
  });

  it('refuses cross-site requests and cookie requests with no browser signal', async () => {
    const user = await createUser(server);
    const api = client(server.url);
    const attempts: Record<string, string>[] = [
      { 'sec-fetch-site': 'cross-site', origin: server.url },
      { origin: 'https://evil.example' },
      { origin: 'null' },
      {},
    ];
    for (const headers of attempts) {
      const res = await api.post('/v1/clients', { name: 'x' }, { cookie: cookieOf(user.session), headers });
      expect(res.status, JSON.stringify(headers)).toBe(403);
      expect(readJson(detailError, res.body).detail.code).toBe('CSRF');
    }
    // The same session as a bearer is not a cookie: no CSRF check applies.
    expect((await api.post('/v1/clients', { name: 'y' }, { token: user.session })).status).toBe(200);
  });
});
