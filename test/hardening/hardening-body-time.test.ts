import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { trickleBody } from '../helpers/raw-http.js';

// Time bounds on a request body (docs/limits.md § A body that stops arriving): a body answered before it
// arrived is not drained (the connection closes after the answer), and a body still arriving after
// REQUEST_BODY_TIMEOUT_MS is cut whatever its pace. Each body here is trickled one byte at a time, faster
// than the idle bound, so only these two rules can end it; the server's close is the signal waited for.

const EVERY_MS = 200;
/** How long a trickle goes on before the test gives up on a close. */
const PATIENCE_MS = 8_000;
const statusOf = (text: string) => Number(/^HTTP\/1\.1 (\d{3}) /.exec(text)?.[1] ?? 0);
const bodyOf = (text: string): unknown => JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));

describe('a body answered before it arrived', () => {
  let server: TestServer;
  beforeAll(async () => {
    // The total bound far beyond the test's patience: only the close after the answer can end these.
    server = await startTestServer({
      env: { REQUEST_BODY_TIMEOUT_MS: '600000', REQUEST_BODY_IDLE_TIMEOUT_MS: '5000' },
    });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('is not drained: the connection closes right after the 401, while bytes are still coming', async () => {
    for (const path of ['/v1/chat/completions', '/mcp/platform']) {
      const t = await trickleBody(server.url, path, {
        contentLength: 100_000,
        everyMs: EVERY_MS,
        maxMs: PATIENCE_MS,
      });
      expect(t.closed, path).toBe(true);
      expect(statusOf(t.received), path).toBe(401);
      expect(t.bytesSent, path).toBeLessThan(100_000);
    }
    expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  });
});

describe('a body that keeps trickling', () => {
  const TOTAL_MS = 1_500;
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({
      env: { REQUEST_BODY_TIMEOUT_MS: String(TOTAL_MS), REQUEST_BODY_IDLE_TIMEOUT_MS: '5000' },
    });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('is cut at REQUEST_BODY_TIMEOUT_MS with 408 in the surface’s shape, whatever its pace', async () => {
    for (const path of ['/v1/login', '/oauth/token']) {
      const t = await trickleBody(server.url, path, {
        contentLength: 100_000,
        everyMs: EVERY_MS,
        maxMs: PATIENCE_MS,
      });
      expect(t.closed, path).toBe(true);
      expect(statusOf(t.received), path).toBe(408);
      // Never before the bound: the body had TOTAL_MS to arrive.
      expect(t.elapsedMs, path).toBeGreaterThanOrEqual(TOTAL_MS - 50);
      const body = bodyOf(t.received) as { detail?: { code: string }; error?: string };
      if (path === '/v1/login') expect(body.detail?.code).toBe('REQUEST_TIMEOUT');
      else expect(body.error).toBe('invalid_request');
    }
  });

  it('leaves a body that arrives within the bound alone', async () => {
    const res = await fetch(`${server.url}/v1/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'nobody@example.com', password: 'not-the-password' }),
    });
    expect(res.status).toBe(401);
  });
});
