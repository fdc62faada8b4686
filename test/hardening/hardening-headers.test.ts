import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { PRODUCTION_ENV, startTestServer, type TestServer } from '../helpers/server.js';
import { rawRequest } from '../helpers/raw-http.js';
import { at, detailError, oauthError, openAiError, readJson } from '../helpers/json.js';

// Item 15 (CONTRACT §1: in dev mode the server answers only Host names of its own origins
// and loopback, so a DNS-rebinding page cannot read /dev/mail) and item 18 (every answer says
// `X-Content-Type-Options: nosniff`; documents cached `public` say what they vary on). Raw HTTP: the
// Host header is sent as a browser on a rebound name would send it.

let dev: TestServer;
let production: TestServer;
beforeAll(async () => {
  // A configured origin with a name of its own (not loopback): its name is served.
  dev = await startTestServer({ env: { V2_URL: 'http://v2.svc.test' } });
  production = await startTestServer({ env: PRODUCTION_ENV });
});
afterAll(async () => {
  await dev?.close();
  await production?.close();
});

const withHost = (host: string, extra: Record<string, string> = {}) => ({ headers: { host, ...extra } });

describe('dev mode answers only its own Host names (item 15)', () => {
  it('refuses a foreign Host with 421 in each surface’s error shape, /dev/mail first', async () => {
    const evil = `evil.example:${dev.port}`;

    const mail = await rawRequest(dev.url, 'GET', '/dev/mail', withHost(evil));
    expect(mail.status).toBe(421);
    const refused = readJson(detailError, mail.json).detail;
    expect(refused.code).toBe('MISDIRECTED_REQUEST');
    expect(refused.message).toContain("Host 'evil.example:");
    expect(mail.text).not.toContain('@'); // no mail in it

    const page = await rawRequest(dev.url, 'GET', '/dev/mail', withHost(evil, { accept: 'text/html' }));
    expect(page.status).toBe(421);
    expect(page.contentType).toContain('text/html');

    // The chat call's own entry (no query) and Express's (with one) refuse alike, in the OpenAI shape.
    for (const path of ['/v1/chat/completions', '/v1/chat/completions?org_id=org_x']) {
      const chat = await rawRequest(dev.url, 'POST', path, {
        headers: { host: evil, 'content-type': 'application/json', authorization: 'Bearer svc_x' },
        body: '{}',
      });
      expect(chat.status, path).toBe(421);
      expect(readJson(openAiError, chat.json).error, path).toMatchObject({ code: 'misdirected_request' });
    }

    const token = await rawRequest(dev.url, 'POST', '/oauth/token', {
      headers: { host: evil, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'grant_type=authorization_code',
    });
    expect(token.status).toBe(421);
    expect(readJson(oauthError, token.json).error).toBe('misdirected_request');

    const mcp = await rawRequest(dev.url, 'POST', '/mcp/platform', {
      headers: { host: evil, 'content-type': 'application/json' },
      body: '{"jsonrpc":"2.0","id":1,"method":"initialize"}',
    });
    expect(mcp.status).toBe(421);
    expect(at(mcp.json, 'jsonrpc')).toBe('2.0');
  });

  it('refuses the run socket’s upgrade on a foreign Host, and opens it on a loopback one', async () => {
    const upgrade = (host: string) =>
      new Promise<number>((resolve, reject) => {
        const ws = new WebSocket(`${dev.url.replace('http', 'ws')}/v1/runs/ws`, { headers: { host } });
        ws.once('unexpected-response', (_req, res) => {
          resolve(res.statusCode ?? 0);
          ws.terminate();
        });
        ws.once('open', () => {
          resolve(101);
          ws.close();
        });
        ws.once('error', reject);
      });
    expect(await upgrade(`evil.example:${dev.port}`)).toBe(421);
    expect(await upgrade(`localhost:${dev.port}`)).toBe(101);
  });

  it('answers its origins’ names and loopback, and refuses look-alikes', async () => {
    const port = dev.port;
    for (const host of [
      `127.0.0.1:${port}`,
      `127.0.0.2:${port}`,
      `localhost:${port}`,
      `LocalHost:${port}`,
      `app.localhost:${port}`,
      `[::1]:${port}`,
      `v2.svc.test:${port}`,
      'v2.svc.test',
    ])
      expect((await rawRequest(dev.url, 'GET', '/healthz', withHost(host))).status, host).toBe(200);
    for (const host of [
      'evil.example',
      `localhost.evil.example:${port}`,
      `127.0.0.1.nip.io:${port}`,
      `svc.test:${port}`,
      `evil.example@127.0.0.1:${port}`,
      `127.1:${port}`,
      `0x7f.0.0.1:${port}`,
    ])
      expect((await rawRequest(dev.url, 'GET', '/healthz', withHost(host))).status, host).toBe(421);
  });

  it('is off in production (no /dev/* there; names are routed by the proxy in front)', async () => {
    const res = await rawRequest(production.url, 'GET', '/healthz', withHost('evil.example'));
    expect(res.status).toBe(200);
    expect((await rawRequest(production.url, 'GET', '/dev/mail', withHost('evil.example'))).status).toBe(404);
  });
});

describe('headers every answer carries (item 18)', () => {
  it('says X-Content-Type-Options: nosniff on JSON answers of every surface, errors included', async () => {
    const answers = await Promise.all([
      rawRequest(dev.url, 'GET', '/healthz'),
      rawRequest(dev.url, 'GET', '/v1/no-such-route'),
      rawRequest(dev.url, 'GET', '/v1/clients'),
      rawRequest(dev.url, 'POST', '/v1/chat/completions', {
        headers: { 'content-type': 'application/json' },
        body: '{}',
      }),
      rawRequest(dev.url, 'POST', '/oauth/token', {
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: 'grant_type=nonsense',
      }),
      rawRequest(dev.url, 'GET', '/.well-known/oauth-authorization-server'),
      rawRequest(dev.url, 'GET', '/openapi.json'),
      rawRequest(dev.url, 'GET', '/healthz', withHost('evil.example')),
      rawRequest(production.url, 'GET', '/v1/models'),
    ]);
    for (const res of answers) {
      expect(res.contentType).toContain('application/json');
      expect(res.headers['x-content-type-options']).toBe('nosniff');
    }
    expect(answers.map((r) => r.status)).toEqual([200, 404, 401, 401, 400, 200, 200, 421, 401]);
  });

  it('documents cached `public` vary on Host alone without TRUST_PROXY', async () => {
    for (const path of ['/.well-known/oauth-authorization-server', '/openapi.json']) {
      const res = await rawRequest(dev.url, 'GET', path);
      expect(res.headers['cache-control'], path).toContain('public');
      expect(res.headers.vary, path).toBe('Host');
    }
  });
});
