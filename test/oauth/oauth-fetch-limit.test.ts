import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { eventually } from '../helpers/eventually.js';
import { sharedFetches } from '../../oauth/client-metadata.js';

// Fetching client ID metadata documents on demand (oauth/client-metadata.ts): the per-address limit
// (RATE_LIMIT_IP_PER_MIN) applies to requests that name a document URL, a failed URL is not fetched
// again for a while, and requests for one URL share one fetch. A real document server on
// loopback counts what reaches it (DEV_MODE allows http://127.0.0.1 client IDs).

let server: TestServer;
let limited: TestServer;
let docServer: Server;
let docBase: string;
const hits = new Map<string, number>();
let release!: () => void;
const held = new Promise<void>((resolve) => (release = resolve));

beforeAll(async () => {
  [server, limited] = await Promise.all([
    startTestServer(),
    startTestServer({ env: { RATE_LIMIT_IP_PER_MIN: '5' } }),
  ]);
  docServer = createServer((req, res) => {
    const path = req.url ?? '';
    hits.set(path, (hits.get(path) ?? 0) + 1);
    // /held/…: answers 404 once the test lets it; /hang/…: never answers (the fetch times out).
    if (path.startsWith('/hang/')) return;
    if (path.startsWith('/held/')) void held.then(() => res.writeHead(404).end());
    else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => docServer.listen(0, '127.0.0.1', resolve));
  docBase = `http://127.0.0.1:${(docServer.address() as AddressInfo).port}`;
});
afterAll(async () => {
  docServer?.closeAllConnections();
  await new Promise((resolve) => docServer?.close(resolve));
  await Promise.all([server?.close(), limited?.close()]);
});

const authorize = (origin: string, clientId: string) =>
  fetch(
    `${origin}/oauth/authorize?client_id=${encodeURIComponent(clientId)}&redirect_uri=${encodeURIComponent('http://127.0.0.1:9/cb')}&response_type=code`,
    { redirect: 'manual' },
  );

describe('client metadata fetches', () => {
  it('a URL that failed is not fetched again for a while', async () => {
    for (let i = 0; i < 3; i++)
      expect((await authorize(server.v2Url, `${docBase}/missing.json`)).status).toBe(400);
    expect(hits.get('/missing.json')).toBe(1);
  });

  it('concurrent requests for one URL share one fetch', async () => {
    const shared = sharedFetches();
    const asked = Promise.all(
      Array.from({ length: 4 }, () => authorize(server.v2Url, `${docBase}/held/one.json`)),
    );
    // The document is held until each request has either fetched it or joined a fetch under way.
    await eventually(
      () => (hits.get('/held/one.json') ?? 0) + sharedFetches() - shared >= 4,
      10_000,
      'each request fetching or sharing a fetch',
    );
    release();
    const answers = await asked;
    expect(answers.map((r) => r.status)).toEqual([400, 400, 400, 400]);
    expect(hits.get('/held/one.json')).toBe(1);
  });

  it('the per-address limit holds requests that would fetch; requests naming no document are not counted', async () => {
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) => authorize(limited.v2Url, `${docBase}/hang/${i}.json`)),
    );
    const statuses = answers.map((r) => r.status);
    expect(statuses.filter((s) => s === 429)).toHaveLength(7);
    expect(answers.find((r) => r.status === 429)!.headers.get('retry-after')).toMatch(/^\d+$/);
    const fetched = [...hits.keys()].filter((k) => k.startsWith('/hang/')).length;
    expect(fetched).toBe(5);
    // svc-cli fetches nothing: the same address is still served.
    const cli = await authorize(limited.v2Url, 'svc-cli');
    expect(cli.status).not.toBe(429);
  });
});
