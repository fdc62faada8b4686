// A small JSON client over real HTTP (fetch), for routes that have no official client.
// A body is `unknown` unless the call names its shape (`api.get<ClientBalance>(…)`, test/helpers/answers.ts)
// or the test reads it through test/helpers/json.ts: the lint's no-unsafe-* rules hold in tests too.

export interface CallOptions {
  body?: unknown;
  /** Bearer credential: a session JWT or an svc_ token. */
  token?: string;
  /** A raw Cookie header. */
  cookie?: string;
  headers?: Record<string, string>;
  query?: Record<string, string | number>;
}

export interface CallResult<T = unknown> {
  status: number;
  body: T;
  headers: Headers;
}

export async function call<T = unknown>(
  base: string,
  method: string,
  path: string,
  opts: CallOptions = {},
): Promise<CallResult<T>> {
  const url = new URL(path, base);
  for (const [k, v] of Object.entries(opts.query ?? {})) url.searchParams.set(k, String(v));
  const headers: Record<string, string> = { 'accept-encoding': 'identity', ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  if (opts.cookie) headers.cookie = opts.cookie;
  let body: string | undefined;
  if (opts.body !== undefined) {
    headers['content-type'] ??= 'application/json';
    body = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
  }
  const res = await fetch(url, { method, headers, body, redirect: 'manual' });
  const text = await res.text();
  let parsed: unknown = text;
  if (res.headers.get('content-type')?.includes('json') && text) parsed = JSON.parse(text);
  return { status: res.status, body: parsed as T, headers: res.headers };
}

/** A client bound to one origin. */
export function client(base: string) {
  return {
    get: <T = unknown>(path: string, opts?: CallOptions) => call<T>(base, 'GET', path, opts),
    post: <T = unknown>(path: string, body?: unknown, opts?: CallOptions) =>
      call<T>(base, 'POST', path, { ...opts, body }),
    put: <T = unknown>(path: string, body?: unknown, opts?: CallOptions) =>
      call<T>(base, 'PUT', path, { ...opts, body }),
    patch: <T = unknown>(path: string, body?: unknown, opts?: CallOptions) =>
      call<T>(base, 'PATCH', path, { ...opts, body }),
    delete: <T = unknown>(path: string, opts?: CallOptions) => call<T>(base, 'DELETE', path, opts),
  };
}
