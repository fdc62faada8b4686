import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';

// A webhook receiver on loopback for the outbound-event tests: it records every
// delivery and answers what `status` says. Its signature check is written here from the documented
// scheme (docs/billing.md "Outbound events"), not taken from svc's own code.

export interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

export interface Receiver {
  url: string;
  received: Received[];
  /** The status to answer the n-th delivery (0-based) with; 200 by default. */
  status: (n: number) => number;
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const received: Received[] = [];
  const receiver: Receiver = {
    url: '',
    received,
    status: () => 200,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const n = received.length;
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() });
      res.writeHead(receiver.status(n), { 'content-type': 'text/plain' }).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  receiver.url = `http://127.0.0.1:${port}/hook`;
  return receiver;
}

/** `svc-signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`, checked as a receiver would. */
export function signatureValid(secret: string, header: string | string[] | undefined, body: string): boolean {
  if (typeof header !== 'string') return false;
  const fields = new Map(header.split(',').map((p) => p.split('=', 2) as [string, string]));
  const t = fields.get('t');
  const v1 = fields.get('v1');
  if (!t || !v1 || !/^[0-9a-f]{64}$/.test(v1)) return false;
  if (Math.abs(Date.now() / 1000 - Number(t)) > 300) return false;
  const expected = createHmac('sha256', secret).update(`${t}.${body}`).digest();
  return timingSafeEqual(expected, Buffer.from(v1, 'hex'));
}

// The one polling helper lives in helpers/eventually.ts; re-exported for tests written against its
// former home.
export { eventually } from './eventually.js';
