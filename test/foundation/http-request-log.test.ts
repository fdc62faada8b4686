import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Writable } from 'node:stream';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import express from 'express';
import { pino } from 'pino';
import { requestLogger } from '../../src/http/request-log.js';
import { parseAs } from '../helpers/json.js';
import { eventually } from '../helpers/eventually.js';

// The request log (src/http/request-log.ts): one line per request with id, method, path, the client's
// address (behind a proxy: test/foundation/proxy-trust.test.ts), status and duration; never the query string or a
// credential (STYLE: Edges). A real pino logger writes into memory here, behind a real express app on
// 127.0.0.1.

const lines: Record<string, unknown>[] = [];
const sink = new Writable({
  write(chunk, _enc, done) {
    for (const line of String(chunk).split('\n'))
      if (line) lines.push(parseAs<Record<string, unknown>>(line));
    done();
  },
});

let server: Server;
let base: string;
let slowArrived = 0;
beforeAll(async () => {
  const app = express();
  app.use(requestLogger(pino({ level: 'info' }, sink), { trustProxy: undefined }));
  app.get('/ok', (_req, res) => {
    res.json({ ok: true });
  });
  app.post('/boom', (_req, res) => {
    res.status(503).json({ down: true });
  });
  app.get('/slow', () => {
    slowArrived++; // never answers: the client leaves
  });
  server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

/** The log line of each request answered so far: one is written when its response finishes. */
const settle = (count = 1) => eventually(() => lines.length >= count, 5_000, `${count} log lines`);

describe('request log', () => {
  it('logs id, method, path (no query), status and duration; echoes a well-formed x-request-id', async () => {
    lines.length = 0;
    const res = await fetch(`${base}/ok?token=svc_secret-in-query`, {
      headers: { 'x-request-id': 'abc-123', authorization: 'Bearer svc_secret-in-header' },
    });
    expect(res.headers.get('x-request-id')).toBe('abc-123');
    await settle();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 30,
      msg: 'request completed',
      req: { id: 'abc-123', method: 'GET', path: '/ok', remoteAddress: '127.0.0.1' },
      res: { status: 200 },
    });
    expect(lines[0]!.responseTime).toEqual(expect.any(Number));
    expect(JSON.stringify(lines)).not.toContain('secret');
  });

  it('gives a fresh id for a malformed one, logs 5xx at error level, and marks a request the client left', async () => {
    lines.length = 0;
    const res = await fetch(`${base}/boom`, { method: 'POST', headers: { 'x-request-id': 'a b' } });
    const id = res.headers.get('x-request-id');
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    const controller = new AbortController();
    const left = fetch(`${base}/slow`, { signal: controller.signal }).catch(() => null);
    await eventually(() => slowArrived === 1, 5_000, '/slow reached its handler');
    controller.abort();
    await left;
    await settle(2);
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({
      level: 50,
      msg: 'request errored',
      req: { id, method: 'POST', path: '/boom' },
      res: { status: 503 },
    });
    expect(lines[1]).toMatchObject({ level: 30, req: { method: 'GET', path: '/slow' }, aborted: true });
  });
});
