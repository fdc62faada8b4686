import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent } from 'undici';
import { SseDecoder } from '../../src/models/upstream/sse.js';
import { streamProvider } from '../../src/models/upstream/provider-stream.js';

// The provider stream reader (src/models/upstream/provider-stream.ts, sse.ts): a real HTTP server on
// loopback writes event streams in awkward pieces, and the reader must hand out exactly the events sent.

describe('SseDecoder', () => {
  const decode = (pieces: (string | Buffer)[]) => {
    const out: string[] = [];
    const d = new SseDecoder((data) => out.push(data));
    for (const p of pieces) d.push(typeof p === 'string' ? Buffer.from(p) : p);
    d.end();
    return out;
  };

  it('joins data lines, skips comments and other fields, reads LF and CRLF, and an open event at the end', () => {
    expect(decode(['data: a\n\n', ': comment\nevent: x\ndata:b\r\ndata:  c\r\n\r\n', 'data: last'])).toEqual([
      'a',
      'b\n c',
    ]);
    expect(decode(['data: open\n'])).toEqual(['open']);
  });

  it('reads a line split anywhere, a multi-byte character split between pieces included', () => {
    const text = 'data: {"content":"héllo → 🦊"}\n\n';
    const bytes = Buffer.from(text);
    for (let cut = 1; cut < bytes.length; cut++) {
      expect(decode([bytes.subarray(0, cut), bytes.subarray(cut)]), `cut at ${cut}`).toEqual([
        '{"content":"héllo → 🦊"}',
      ]);
    }
    expect(decode([...bytes].map((b) => Buffer.from([b])))).toEqual(['{"content":"héllo → 🦊"}']);
  });
});

describe('streamProvider over HTTP', () => {
  let server: Server;
  let base: string;
  const agent = new Agent({ connections: 4 });
  let handler: (res: ServerResponse, closed: Promise<void>) => void;

  beforeAll(async () => {
    server = createServer((req, res) => {
      const closed = new Promise<void>((resolve) => res.on('close', () => resolve()));
      req.resume();
      handler(res, closed);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await agent.close();
    await new Promise((resolve) => server.close(resolve));
  });

  const open = (signal = new AbortController().signal) =>
    streamProvider<{ n: number }>(agent, { origin: base, path: '/', method: 'POST', body: '{}' }, signal, {
      parse: (data) => JSON.parse(data) as { n: number },
      statusError: (status, _headers, text) => new Error(`status ${status}: ${text}`),
      networkError: (err) => (err instanceof Error ? err : new Error(String(err))),
    });

  it('hands out every event in order, written in odd pieces, and stops at [DONE]', async () => {
    handler = (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const all =
        Array.from({ length: 300 }, (_, n) => `data: {"n":${n}}\n\n`).join('') +
        'data: [DONE]\n\ndata: {"n":-1}\n\n';
      let at = 0;
      const next = () => {
        if (at >= all.length) return res.end();
        const size = 1 + ((at * 7) % 97);
        res.write(all.slice(at, at + size));
        at += size;
        setImmediate(next);
      };
      next();
    };
    const seen: number[] = [];
    for await (const chunk of open()) {
      seen.push(chunk.n);
      // The scenario: a slow reader, so the provider is paused and resumed under it.
      if (chunk.n % 50 === 0) await new Promise((r) => setTimeout(r, 5));
    }
    expect(seen).toEqual(Array.from({ length: 300 }, (_, n) => n));
  });

  it('a reader that stops before the end aborts the request', async () => {
    let closed!: Promise<void>;
    handler = (res, onClose) => {
      closed = onClose;
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"n":1}\n\n');
      // ...and never ends.
    };
    const stream = open();
    expect((await stream.next()).value).toEqual({ n: 1 });
    await stream.return!();
    await closed; // the provider saw the connection go
    expect(await stream.next()).toEqual({ value: undefined, done: true });
  });

  it('the caller’s abort fails a pending read with the abort reason', async () => {
    let atProvider!: () => void;
    const reached = new Promise<void>((resolve) => (atProvider = resolve));
    handler = (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(': waiting\n\n');
      atProvider();
    };
    const controller = new AbortController();
    const stream = open(controller.signal);
    const pending = stream.next();
    await reached; // the request is at the provider and the read waits for an event
    controller.abort(new Error('client left'));
    await expect(pending).rejects.toThrow('client left');
  });

  it('a status of 300 or more fails with statusError, given the body', async () => {
    handler = (res) => {
      res.writeHead(503, { 'content-type': 'application/json' });
      res.end('{"error":"busy"}');
    };
    await expect(open().next()).rejects.toThrow('status 503: {"error":"busy"}');
  });

  it('an event that does not parse fails the stream after the events before it', async () => {
    handler = (res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end('data: {"n":1}\n\ndata: {oops\n\ndata: {"n":2}\n\n');
    };
    const stream = open();
    expect((await stream.next()).value).toEqual({ n: 1 });
    await expect(stream.next()).rejects.toThrow();
    expect((await stream.next()).done).toBe(true);
  });
});
