// The floor under any proxy that must ask its database before it calls the provider (svc revalidates
// the caller and holds credits first: CONTRACT §8, §9): one PostgreSQL round trip (`select 1`), then the
// request forwarded as raw bytes and the answer streamed back untouched. No auth, no billing, no
// parsing. Beside svc in `npm run bench -- proxy`, it shows how much of svc's added first-byte latency
// is the two extra process hops every such design pays on this machine, and how much is svc's own work.
//
// Under /settled, the floor of a proxy that also records each call durably before it answers, as CONTRACT
// §9 has svc do (the JSON answer's `x-svc-outcome` header reports the debit and the balance after it, so a
// JSON answer waits for the settle's commit): the same round trip and forward, then one row inserted and
// committed with the WAL flushed (PostgreSQL's default synchronous_commit), then the answer. A JSON answer
// is held until that commit; a stream's chunks go on as they come and only its end waits for it.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { Agent } from 'undici';
import { announce } from './children.js';

const pool = new pg.Pool({ connectionString: process.env.FLOOR_DATABASE_URL, max: 10 });
const agent = new Agent({ connections: 128, keepAliveTimeout: 30_000 });
const upstream = new URL(`${process.env.FAKE_URL}/chat/completions`);
/** The settled floor's own table, dropped when the floor stops. */
const SETTLES = `bench_floor_settles_${process.pid}`;

async function settle(): Promise<void> {
  await pool.query(`insert into ${SETTLES} default values`);
}

// The forward never rejects (its catch answers 502), so the request handler need not await it.
async function forward(req: IncomingMessage, res: ServerResponse) {
  const settled = req.url?.startsWith('/settled/') ?? false;
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
    const type = String(answer.headers['content-type'] ?? 'application/json');
    if (settled && !type.startsWith('text/event-stream')) {
      const body = Buffer.from(await answer.body.arrayBuffer());
      await settle();
      res.writeHead(answer.statusCode, { 'content-type': type, 'content-length': body.length });
      res.end(body);
      return;
    }
    res.writeHead(answer.statusCode, { 'content-type': type });
    let first = true;
    for await (const chunk of answer.body) {
      res.write(chunk);
      // As svc does: the first chunk leaves now, not on the next tick (Node corks each response write).
      if (first) res.uncork();
      first = false;
    }
    if (settled) await settle();
    res.end();
  } catch {
    if (!res.headersSent) res.writeHead(502);
    res.end();
  }
}
await pool.query(`create table ${SETTLES} (id bigserial primary key, at timestamptz not null default now())`);
const server = createServer((req, res) => void forward(req, res));
server.listen(0, '127.0.0.1', () =>
  announce({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` }),
);
process.on('SIGTERM', () => {
  server.close();
  void pool
    .query(`drop table if exists ${SETTLES}`)
    .catch(() => {})
    .finally(() => void pool.end().finally(() => process.exit(0)));
});
