import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { startForwardingProxy, type ForwardingProxy } from '../helpers/forwarding-proxy.js';
import { rawRequest } from '../helpers/raw-http.js';
import { at, parseAs } from '../helpers/json.js';

// TRUST_PROXY as a hop count or the proxies' addresses (CONTRACT §1): the client's
// address is the right-most X-Forwarded-For entry that is not a trusted proxy, so a client that writes
// its own X-Forwarded-For cannot pick the key the per-address limit counts on. Real proxies in processes
// of their own (test/helpers/forwarding-proxy.ts) stand in front of the server; each client connects
// from its own loopback address (127.0.0.10, .11, …), so the server sees real, distinct peers.

const LIMIT = 5;

let attempt = 0;

/**
 * A failed sign-in (a per-address limited route): 401 within the budget, 429 beyond it. Each for an
 * e-mail of its own, so the per-e-mail failure limit never answers instead.
 */
function signIn(base: string, from: string, forwardedFor?: string) {
  return rawRequest(base, 'POST', '/v1/login', {
    localAddress: from,
    headers: {
      'content-type': 'application/json',
      ...(forwardedFor ? { 'x-forwarded-for': forwardedFor } : {}),
    },
    body: JSON.stringify({ email: `nobody-${++attempt}@example.test`, password: 'Wrong-password-1' }),
  });
}

/** `count` sign-ins from `from`, each with a different made-up left-most X-Forwarded-For. */
async function rotatingSpoofs(base: string, from: string, count: number): Promise<number[]> {
  const statuses: number[] = [];
  for (let i = 0; i < count; i++)
    statuses.push((await signIn(base, from, `203.0.113.${i + 1}, 198.51.100.${i + 1}`)).status);
  return statuses;
}

describe('TRUST_PROXY values (CONTRACT §1)', () => {
  it('takes a hop count or a list of addresses/CIDRs, and refuses `true` naming the variable', () => {
    expect(loadConfig({}).trustProxy).toBeUndefined();
    expect(loadConfig({ TRUST_PROXY: '0' }).trustProxy).toBeUndefined();
    expect(loadConfig({ TRUST_PROXY: '2' }).trustProxy).toEqual({ hops: 2 });
    expect(loadConfig({ TRUST_PROXY: '10.0.0.0/8, 127.0.0.5,::1' }).trustProxy).toEqual({
      addresses: ['10.0.0.0/8', '127.0.0.5', '::1'],
    });
    for (const bad of ['true', 'yes', 'on', 'proxy.example', '10.0.0.0/99', '1.2.3.4,', '65'])
      expect(() => loadConfig({ TRUST_PROXY: bad }), bad).toThrow(ConfigError);
    expect(() => loadConfig({ TRUST_PROXY: 'true' })).toThrow(/TRUST_PROXY: 'true' is not accepted/);
  });
});

describe('TRUST_PROXY=1: one proxy in front', () => {
  /** The request log's lines, as far as these tests read them (src/http/request-log.ts). */
  const logLines: { req?: { path?: string; remoteAddress?: string } }[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n'))
        if (line) logLines.push(parseAs<(typeof logLines)[number]>(line));
      done();
    },
  });
  let server: TestServer;
  let proxy: ForwardingProxy;
  beforeAll(async () => {
    server = await startTestServer({
      env: { TRUST_PROXY: '1', RATE_LIMIT_IP_PER_MIN: String(LIMIT), LOG_LEVEL: 'info' },
      log: sink,
    });
    proxy = await startForwardingProxy({ target: server.url, localAddress: '127.0.0.5' });
  });
  afterAll(async () => {
    await proxy?.close();
    await server?.close();
  });

  it('a client rotating its own left-most X-Forwarded-For still meets 429 after its budget', async () => {
    const statuses = await rotatingSpoofs(proxy.url, '127.0.0.10', LIMIT + 1);
    expect(statuses.slice(0, LIMIT)).toEqual(Array(LIMIT).fill(401));
    expect(statuses[LIMIT]).toBe(429);
  });

  it('another client behind the same proxy keeps its own budget (the proxy is not the key)', async () => {
    expect((await signIn(proxy.url, '127.0.0.11')).status).toBe(401);
  });

  it("logs each request with the client's address, not the proxy's or a spoofed one", () => {
    const signIns = logLines.filter((l) => l.req?.path === '/v1/login');
    expect(signIns.length).toBe(LIMIT + 2);
    expect(signIns.slice(0, LIMIT + 1).map((l) => l.req?.remoteAddress)).toEqual(
      Array(LIMIT + 1).fill('127.0.0.10'),
    );
    expect(signIns[LIMIT + 1]!.req?.remoteAddress).toBe('127.0.0.11');
  });
});

describe('TRUST_PROXY=<addresses>: two proxies in a chain', () => {
  let server: TestServer;
  let inner: ForwardingProxy;
  let outer: ForwardingProxy;
  beforeAll(async () => {
    server = await startTestServer({
      env: { TRUST_PROXY: '127.0.0.5, 127.0.0.6/32', RATE_LIMIT_IP_PER_MIN: String(LIMIT) },
    });
    inner = await startForwardingProxy({
      target: server.url,
      localAddress: '127.0.0.5',
      keepForwardedHost: true,
    });
    outer = await startForwardingProxy({ target: inner.url, localAddress: '127.0.0.6' });
  });
  afterAll(async () => {
    await outer?.close();
    await inner?.close();
    await server?.close();
  });

  it('the key is the right-most address that is not a listed proxy: spoofs through the chain still meet 429', async () => {
    const statuses = await rotatingSpoofs(outer.url, '127.0.0.10', LIMIT + 1);
    expect(statuses.slice(0, LIMIT)).toEqual(Array(LIMIT).fill(401));
    expect(statuses[LIMIT]).toBe(429);
    // A second client through the same chain: its own budget.
    expect((await signIn(outer.url, '127.0.0.11')).status).toBe(401);
  });

  it('a client that reaches the server directly is keyed on its own address, whatever it forwards', async () => {
    // 127.0.0.12 is no listed proxy: its X-Forwarded-For naming 127.0.0.11 is not read.
    const direct: number[] = [];
    for (let i = 0; i <= LIMIT; i++)
      direct.push((await signIn(server.url, '127.0.0.12', '127.0.0.11')).status);
    expect(direct.slice(0, LIMIT)).toEqual(Array(LIMIT).fill(401));
    expect(direct[LIMIT]).toBe(429);
    // 127.0.0.11 used one of its five above; the direct client's five did not count against it.
    expect((await signIn(outer.url, '127.0.0.11')).status).toBe(401);
  });

  it('X-Forwarded-Host chooses the origin only from a trusted proxy, and cached documents say Vary', async () => {
    const v2Host = new URL(server.v2Url).host;
    const viaProxy = await rawRequest(outer.url, 'GET', '/.well-known/oauth-authorization-server', {
      headers: { host: v2Host },
    });
    expect(viaProxy.status).toBe(200);
    expect(at(viaProxy.json, 'issuer')).toBe(server.v2Url);
    expect(viaProxy.headers.vary).toBe('Host, X-Forwarded-Host');
    expect(viaProxy.headers['cache-control']).toContain('public');

    const direct = await rawRequest(server.url, 'GET', '/.well-known/oauth-authorization-server', {
      localAddress: '127.0.0.12',
      headers: { 'x-forwarded-host': v2Host },
    });
    expect(at(direct.json, 'issuer')).toBe(server.url);

    const openapi = await rawRequest(outer.url, 'GET', '/openapi.json', { headers: { host: v2Host } });
    expect(openapi.headers.vary).toBe('Host, X-Forwarded-Host');
  });
});
