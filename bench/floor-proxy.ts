// The floor under any proxy that must ask its database before it calls the provider (svc revalidates
// the caller and holds credits first: CONTRACT §8, §9): one PostgreSQL round trip (`select 1`), then the
// request forwarded as raw bytes and the answer streamed back untouched. No auth, no billing, no
// parsing. Beside svc in `npm run bench -- proxy`, it shows how much of svc's added first-byte latency
// is the two extra process hops every such design pays on this machine, and how much is svc's own work.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { Agent } from 'undici';
import { announce } from './children.js';

const pool = new pg.Pool({ connectionString: process.env.FLOOR_DATABASE_URL, max: 10 });
const agent = new Agent({ connections: 128, keepAliveTimeout: 30_000 });
const upstream = new URL(`${process.env.FAKE_URL}/chat/completions`);

// The forward never rejects (its catch answers 502), so the request handler need not await it.
async function forward(req: IncomingMessage, res: ServerResponse) {
  try {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    await pool.query('select 1');
    const answer = await agent.request({
      origin: upstream.origin,
      path: upstream.pathname,
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: req.headers.authorization ?? '' },
      body: Buffer.concat(chunks),
    });
    res.writeHead(answer.statusCode, {
      'content-type': String(answer.headers['content-type'] ?? 'application/json'),
    });
    let first = true;
    for await (const chunk of answer.body) {
      res.write(chunk);
      // As svc does: the first chunk leaves now, not on the next tick (Node corks each response write).
      if (first) res.uncork();
      first = false;
    }
    res.end();
  } catch {
    if (!res.headersSent) res.writeHead(502);
    res.end();
  }
}
const server = createServer((req, res) => void forward(req, res));
server.listen(0, '127.0.0.1', () =>
  announce({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }),
);
process.on('SIGTERM', () => {
  server.close();
  void pool.end().finally(() => process.exit(0));
});
