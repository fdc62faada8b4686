import { createServer, type Server, type ServerResponse } from 'node:http';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startChildServer, type ChildServer } from '../helpers/child-server.js';
import { textPieces, countText } from '../../src/models/upstream/local-words.js';
import { openAiError, readJson } from '../helpers/json.js';

// One request must never stall everyone. svc runs in a child process: on the old code each
// hostile request below froze its event loop for minutes or hours, which in-process would have frozen
// the test runner with it. Each test asserts that /healthz answers while the hostile request is still
// running; on the old code it never did, and the test failed by its timeout.

/** A provider that streams what the test says, chunk by chunk, and holds the stream open until released. */
interface HoldingProvider {
  url: string;
  /** The chunks of the next stream (delta contents). */
  script: string[];
  /** Resolved with the open response once the script has been written and flushed. */
  opened: Promise<ServerResponse>;
  release(): void;
  close(): Promise<void>;
}

async function startHoldingProvider(): Promise<HoldingProvider> {
  let openedResolve!: (res: ServerResponse) => void;
  let held: ServerResponse | null = null;
  const provider = {
    url: '',
    script: [] as string[],
    opened: new Promise<ServerResponse>((r) => (openedResolve = r)),
    release() {
      const res = held;
      held = null;
      provider.opened = new Promise<ServerResponse>((r) => (openedResolve = r));
      res?.end(
        `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } })}\n\ndata: [DONE]\n\n`,
      );
    },
    close: async () => {},
  };
  const server: Server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      for (const content of provider.script)
        res.write(
          `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`,
        );
      held = res;
      res.write('', () => openedResolve(res));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  provider.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  provider.close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
  return provider;
}

const healthz = async (svc: ChildServer) => (await fetch(`${svc.url}/healthz`)).status;
const WHITESPACE_MB = 3;
const hostileText = () => 'hi' + ' '.repeat(WHITESPACE_MB * 1024 * 1024);

let provider: HoldingProvider;
let svc: ChildServer;
beforeAll(async () => {
  provider = await startHoldingProvider();
  svc = await startChildServer({
    env: { MODEL_UPSTREAM_URL: provider.url, MODEL_UPSTREAM_KEY: 'sk-test', MODEL_ID: 'svc-test-model' },
    balance: 100_000_000,
  });
});
afterAll(async () => {
  await svc?.close();
  await provider?.close();
});

const sdk = () => new OpenAI({ apiKey: svc.key, baseURL: `${svc.url}/v1`, maxRetries: 0 });

describe('token counting is linear', () => {
  it('splits text as /\\s*\\S+/g did, on random mixes of spaces, words and Unicode space', () => {
    const alphabet = [' ', 'a', '\n', 'bc', '\u00a0', 'é', '\t', '\u2003', '😀'];
    for (let i = 0; i < 3000; i++) {
      let text = '';
      for (let j = 0; j < i % 25; j++) text += alphabet[(i * 7 + j * 13 + ((i * j) % 5)) % alphabet.length];
      const expected = text.match(/\s*\S+/g) ?? [];
      expect(textPieces(text)).toEqual(expected);
      expect(countText(text)).toBe(expected.length);
    }
  });

  it(`counts a streamed reply with ${WHITESPACE_MB} MB of whitespace while /healthz keeps answering`, async () => {
    provider.script = [hostileText(), ' tail'];
    const stream = await sdk().chat.completions.create({
      model: 'x',
      stream: true,
      messages: [{ role: 'user', content: 'hello' }],
    });
    const chunks = stream[Symbol.asyncIterator]();
    // svc counts a delta before it relays it (StreamMeter.observe), so receiving it means it was counted.
    let received = '';
    while (!received.endsWith('tail')) {
      const next = await chunks.next();
      expect(next.done).toBe(false);
      if (next.done) break;
      received += next.value.choices[0]?.delta?.content ?? '';
    }
    expect(received.length).toBe(hostileText().length + ' tail'.length);
    // The stream is still open (the provider holds it): the server answers others meanwhile.
    expect(await healthz(svc)).toBe(200);
    provider.release();
    for (let next = await chunks.next(); !next.done; next = await chunks.next());
  });

  it(`estimates a ${WHITESPACE_MB} MB whitespace prompt of an aborted stream while /healthz keeps answering`, async () => {
    provider.script = ['partial'];
    const controller = new AbortController();
    const stream = await sdk().chat.completions.create(
      { model: 'x', stream: true, messages: [{ role: 'user', content: hostileText() }] },
      { signal: controller.signal },
    );
    const chunks = stream[Symbol.asyncIterator]();
    const first = await chunks.next();
    expect(first.done).toBe(false);
    await provider.opened;
    // The client leaves before the usage chunk: svc counts the prompt it has to debit with the tokenizer, slice by slice.
    controller.abort();
    await chunks.next().catch(() => undefined);
    expect(await healthz(svc)).toBe(200);
    expect(await healthz(svc)).toBe(200);
    provider.release();
  });
});

/** A request whose headers promise `declared` bytes of body, of which only `first` is sent until finish(). */
function heldUpload(
  base: string,
  path: string,
  headers: Record<string, string>,
  declared: number,
  first: Buffer,
) {
  const url = new URL(base);
  const req = http.request({
    host: url.hostname,
    port: url.port,
    method: 'POST',
    path,
    headers: { 'content-type': 'application/json', 'content-length': String(declared), ...headers },
  });
  const answer = new Promise<{ status: number; json: unknown; complete: boolean }>((resolve, reject) => {
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, json: JSON.parse(text) as unknown, complete }),
      );
    });
    req.on('error', reject);
  });
  let complete = false;
  req.write(first);
  return {
    answer,
    finish(rest: Buffer) {
      req.end(rest, () => (complete = true));
    },
    destroy: () => req.destroy(),
  };
}

const TEN_MB = 10 * 1024 * 1024;
/** A 10 MB body that is nothing but nesting: `[[[[…]]]]`. */
const nested = (bytes: number) => Buffer.from('['.repeat(bytes / 2) + ']'.repeat(bytes / 2));
const forgedKey = `svc_${'A'.repeat(43)}`;

describe('credential before body, nesting limit', () => {
  it('answers chat calls without a valid credential 401 before their 10 MB bodies arrive; /healthz meanwhile', async () => {
    const credentials: Record<string, string>[] = [
      {},
      { authorization: `Bearer ${forgedKey}` },
      { authorization: 'Bearer not-a-token' },
      { authorization: 'Basic dXNlcjpwYXNz' },
      { authorization: `Bearer ${forgedKey}`, 'x-svc-organisation': svc.orgId },
      { authorization: 'Bearer eyJhbGciOiJFUzI1NiJ9.e30.sig' },
      { authorization: `Bearer ${svc.session}` },
      {},
    ];
    const body = nested(TEN_MB);
    const uploads = credentials.map((headers) =>
      heldUpload(svc.url, '/v1/chat/completions', headers, body.length, body.subarray(0, 64 * 1024)),
    );
    try {
      const answers = await Promise.all(uploads.map((u) => u.answer));
      for (const a of answers) {
        expect(a.status).toBe(401);
        expect(readJson(openAiError, a.json).error).toMatchObject({ type: 'authentication_error' });
        // Answered while the rest of the body was still withheld: it was never read, let alone parsed.
        expect(a.complete).toBe(false);
      }
      expect(await healthz(svc)).toBe(200);
    } finally {
      for (const u of uploads) u.destroy();
    }
  });

  it('answers /mcp/platform without a grant 401 before its body arrives', async () => {
    const body = nested(TEN_MB);
    const upload = heldUpload(svc.url, '/mcp/platform', {}, body.length, body.subarray(0, 64 * 1024));
    try {
      const a = await upload.answer;
      expect(a.status).toBe(401);
      expect(a.json).toMatchObject({ jsonrpc: '2.0', error: { code: -32001 } });
      expect(a.complete).toBe(false);
      expect(await healthz(svc)).toBe(200);
    } finally {
      upload.destroy();
    }
  });

  it('refuses 10 MB nested bodies of a valid caller 400 without parsing them; /healthz meanwhile', async () => {
    const body = nested(TEN_MB);
    const uploads = Array.from({ length: 8 }, () =>
      heldUpload(
        svc.url,
        '/v1/chat/completions',
        { authorization: `Bearer ${svc.key}` },
        body.length,
        body.subarray(0, 1),
      ),
    );
    for (const u of uploads) u.finish(body.subarray(1));
    const probe = healthz(svc);
    const answers = await Promise.all(uploads.map((u) => u.answer));
    for (const a of answers) {
      expect(a.status).toBe(400);
      const refused = readJson(openAiError, a.json).error;
      expect(refused).toMatchObject({ code: 'validation_error', type: 'invalid_request_error' });
      expect(refused.message).toMatch(/nested deeper than 64 levels/);
    }
    expect(await probe).toBe(200);
  });
});
