// A tiny browser for the server-rendered pages over real HTTP: a cookie jar (Set-Cookie honoured,
// deletions included), manual redirects (so tests see every 303 and its Location), urlencoded form
// posts, and the hidden CSRF field read back from the page like a browser would submit it.

export interface PageResponse {
  status: number;
  headers: Headers;
  text: string;
  /** Location header resolved against the request URL (absolute), or null. */
  location: string | null;
  url: string;
}

export class PageClient {
  readonly jar = new Map<string, string>();
  constructor(readonly base: string) {}

  cookieHeader(): string {
    return [...this.jar].map(([k, v]) => `${k}=${v}`).join('; ');
  }

  private store(headers: Headers) {
    for (const line of headers.getSetCookie()) {
      const [pair, ...attrs] = line.split(';');
      const eq = pair!.indexOf('=');
      const name = pair!.slice(0, eq).trim();
      const value = pair!.slice(eq + 1).trim();
      const expired = attrs.some((a) => {
        const [k, v] = a.trim().split('=');
        if (k!.toLowerCase() === 'max-age') return Number(v) <= 0;
        if (k!.toLowerCase() === 'expires') return new Date(v!).getTime() <= Date.now();
        return false;
      });
      if (expired || value === '') this.jar.delete(name);
      else this.jar.set(name, value);
    }
  }

  async request(
    method: string,
    path: string,
    opts: { form?: Record<string, string>; headers?: Record<string, string> } = {},
  ): Promise<PageResponse> {
    const url = new URL(path, this.base).toString();
    const headers: Record<string, string> = {
      'accept-encoding': 'identity',
      accept: 'text/html',
      ...opts.headers,
    };
    const cookie = this.cookieHeader();
    if (cookie) headers.cookie = cookie;
    let body: string | undefined;
    if (opts.form) {
      headers['content-type'] = 'application/x-www-form-urlencoded';
      body = new URLSearchParams(opts.form).toString();
    }
    const res = await fetch(url, { method, headers, body, redirect: 'manual' });
    this.store(res.headers);
    const loc = res.headers.get('location');
    return {
      status: res.status,
      headers: res.headers,
      text: await res.text(),
      location: loc ? new URL(loc, url).toString() : null,
      url,
    };
  }

  get(path: string, headers?: Record<string, string>) {
    return this.request('GET', path, { headers: headers ?? {} });
  }

  post(path: string, form: Record<string, string>, headers?: Record<string, string>) {
    return this.request('POST', path, { form, headers: headers ?? {} });
  }

  /** Follows redirects (GET) until a non-redirect answer, at most 10 hops. */
  async follow(res: PageResponse): Promise<PageResponse> {
    for (let i = 0; i < 10 && res.location && res.status >= 300 && res.status < 400; i++)
      res = await this.get(res.location);
    return res;
  }

  /** Loads `pagePath`, then submits its form posting to `action` with the page's CSRF token plus `fields`. */
  async submit(pagePath: string, action: string, fields: Record<string, string>): Promise<PageResponse> {
    const page = await this.get(pagePath);
    return this.post(action, { csrf_token: csrfOf(page.text), ...fields });
  }
}

/** The hidden CSRF field's value in a page. */
export function csrfOf(pageHtml: string): string {
  const m = /name="csrf_token" value="([^"]+)"/.exec(pageHtml);
  if (!m) throw new Error('no CSRF field in the page');
  return m[1]!;
}

/** The value of a hidden input by name. */
export function hiddenOf(pageHtml: string, name: string): string | null {
  const m = new RegExp(`<input type="hidden" name="${name}" value="([^"]*)"`).exec(pageHtml);
  return m
    ? m[1]!
        .replace(/&amp;/g, '&')
        .replace(/&#39;/g, "'")
        .replace(/&quot;/g, '"')
    : null;
}
