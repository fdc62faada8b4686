import http from 'node:http';
import net from 'node:net';

// Raw HTTP for hostile-input tests: the request line is sent byte for byte (fetch and URL would
// normalise `../`, reject `%ZZ` or re-encode unicode), bodies and content types exactly as given.

export interface RawResult {
  status: number;
  contentType: string;
  text: string;
  /** Parsed JSON when the answer says it is JSON (undefined when it does not parse); read it with
   * helpers/json.ts. */
  json: unknown;
  headers: http.IncomingHttpHeaders;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });

export function rawRequest(
  base: string,
  method: string,
  path: string,
  opts: {
    headers?: Record<string, string>;
    body?: string | Buffer;
    /** Connect from this loopback address (127.0.0.x): one client among several, on a connection of its own. */
    localAddress?: string;
  } = {},
): Promise<RawResult> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { ...opts.headers };
    if (opts.body !== undefined) headers['content-length'] = Buffer.byteLength(opts.body);
    // Node refuses raw non-ASCII in a request line; a browser would percent-encode it the same way.
    const line = path.replace(/[^\x21-\x7e]/gu, (ch) => encodeURIComponent(ch));
    const req = http.request(
      {
        ...(opts.localAddress ? { agent: false, localAddress: opts.localAddress } : { agent }),
        host: url.hostname,
        port: url.port,
        method,
        path: line,
        headers,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const contentType = String(res.headers['content-type'] ?? '');
          let json: unknown;
          if (contentType.includes('json')) {
            try {
              json = JSON.parse(text);
            } catch {
              json = undefined;
            }
          }
          resolve({ status: res.statusCode ?? 0, contentType, text, json, headers: res.headers });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    if (opts.body !== undefined) req.write(opts.body);
    req.end();
  });
}

/** Runs `tasks` with at most `width` in flight. */
export async function pool<T>(tasks: (() => Promise<T>)[], width = 6): Promise<T[]> {
  const out = new Array<T>(tasks.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, tasks.length) }, async () => {
      while (next < tasks.length) {
        const i = next++;
        out[i] = await tasks[i]!();
      }
    }),
  );
  return out;
}

export interface Trickled {
  /** Everything the server sent, as text. */
  received: string;
  /** True when the server closed the connection (the signal these tests wait for); false when `maxMs` passed first. */
  closed: boolean;
  /** Body bytes written before the close (or before `maxMs`). */
  bytesSent: number;
  /** Milliseconds from the request head to the close (or to `maxMs`). */
  elapsedMs: number;
}

/**
 * Sends a request head announcing `contentLength` bytes, then one body byte every `everyMs`, until the
 * server closes the connection or `maxMs` passes (then the socket is destroyed). The close, not a sleep,
 * is what the caller waits for.
 */
export function trickleBody(
  base: string,
  path: string,
  opts: { contentLength: number; everyMs: number; maxMs: number; headers?: Record<string, string> },
): Promise<Trickled> {
  const url = new URL(base);
  return new Promise((resolve) => {
    const socket = net.connect(Number(url.port), url.hostname);
    let received = '';
    let bytesSent = 0;
    const started = Date.now();
    const finish = (closed: boolean) => {
      clearInterval(drip);
      clearTimeout(limit);
      socket.destroy();
      resolve({ received, closed, bytesSent, elapsedMs: Date.now() - started });
    };
    socket.setEncoding('utf8');
    socket.on('data', (c: string) => (received += c));
    socket.on('error', () => {});
    // The server's FIN ('end') or a reset ('close'): either way the connection is over.
    socket.on('end', () => finish(true));
    socket.on('close', () => finish(true));
    const extra = Object.entries(opts.headers ?? {})
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('');
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: application/json\r\n${extra}` +
        `Content-Length: ${opts.contentLength}\r\n\r\n`,
    );
    const drip = setInterval(() => {
      if (bytesSent >= opts.contentLength || socket.destroyed || !socket.writable) return;
      socket.write(bytesSent === 0 ? '{' : ' ');
      bytesSent++;
    }, opts.everyMs);
    const limit = setTimeout(() => finish(false), opts.maxMs);
  });
}
