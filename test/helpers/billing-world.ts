import { afterAll, beforeAll, expect } from 'vitest';
import type { TestUser } from './fixtures.js';
import type { Checkout, ClientBalance } from './answers.js';
import { startTestServer, type StartOptions, type TestServer } from './server.js';
import { client } from './http.js';

// The billing test files' common preamble: a server of the file's own started before its tests and
// closed after, and the dev processor's pages (CONTRACT §8: /dev/checkout, /dev/portal, /dev/invoices)
// driven as a browser drives them: the page's cookie, its CSRF field, its form's action.

export interface ServerWorld {
  server: TestServer;
  api: ReturnType<typeof client>;
}

/** Registers the hooks that start a server (with `options`) before the file's or block's tests and close it after. */
export function useTestServer(options: StartOptions = {}): ServerWorld {
  const world = {} as ServerWorld;
  beforeAll(async () => {
    world.server = await startTestServer(options);
    world.api = client(world.server.url);
  });
  afterAll(async () => {
    await world.server?.close();
  });
  return world;
}

export interface DevForm {
  /** The page's HTML. */
  text: string;
  cookie: string;
  csrf: string | undefined;
  /** The action of the first form posting to a path ending in `suffix`; null when the page has none. */
  action: URL | null;
}

/** Opens a dev processor page like a browser: its cookie, its CSRF field and the form posting to `…suffix`. */
export async function openDevPage(url: string, suffix = ''): Promise<DevForm> {
  const page = await fetch(url);
  expect(page.status).toBe(200);
  const text = await page.text();
  const cookie = page.headers
    .getSetCookie()
    .map((c) => c.split(';')[0])
    .join('; ');
  const csrf = /name="csrf_token" value="([^"]+)"/.exec(text)?.[1];
  const action = new RegExp(`<form method="post" action="([^"]+${suffix})"`).exec(text)?.[1];
  return { text, cookie, csrf, action: action ? new URL(action, url) : null };
}

/** Posts `fields` to the page's form with its cookie and origin, as the browser would; redirects not followed. */
export function postDevForm(form: Pick<DevForm, 'cookie' | 'action'>, fields: Record<string, string>) {
  return fetch(form.action!, {
    method: 'POST',
    headers: {
      'content-type': 'application/x-www-form-urlencoded',
      cookie: form.cookie,
      origin: form.action!.origin,
    },
    body: new URLSearchParams(fields).toString(),
    redirect: 'manual',
  });
}

/** The default client's balance in tokens. */
export async function clientBalance(world: ServerWorld, u: TestUser): Promise<number> {
  return (
    await world.api.get<ClientBalance>(`/v1/clients/${u.clientId}/credits/balance`, { token: u.session })
  ).body.balance_credits;
}

/** Buys `cents` of tokens for the user's default client through the dev checkout's form. */
export async function payDevTopup(world: ServerWorld, u: TestUser, cents: number): Promise<void> {
  const start = await world.api.post<Checkout>(
    `/v1/clients/${u.clientId}/credits/topup`,
    { amount_usd: cents, success_url: 'https://app.example/ok', cancel_url: 'https://app.example/cancel' },
    { token: u.session },
  );
  expect(start.status).toBe(200);
  const checkout = await openDevPage(start.body.checkout_url);
  expect((await postDevForm(checkout, { csrf_token: checkout.csrf!, decision: 'pay' })).status).toBe(303);
}
