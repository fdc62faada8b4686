import http from 'node:http';

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
