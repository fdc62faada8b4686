import { expect } from 'vitest';
import { generate } from 'otplib';
import { randomToken } from '../../src/ids.js';
import { client } from './http.js';
import { detailOf } from './json.js';
import type { TestServer } from './server.js';
import { createUser, STRONG_PASSWORD } from './fixtures.js';
import type { CreatedClient, DevMail, Page, UserRow } from './answers.js';

// Shared steps of the account tests, all over real HTTP (the account routes are what is under test).

export type Api = ReturnType<typeof client>;

export const newEmail = (tag = 'acct') => `${tag}-${randomToken(6)}@example.test`;

/** A 429 RATE_LIMITED in the contract's shape, asking to wait at most `most` seconds. */
export function expectLimited(res: { status: number; body: unknown; headers: Headers }, most: number) {
  expect(res.status, JSON.stringify(res.body)).toBe(429);
  expect(detailOf(res.body).code).toBe('RATE_LIMITED');
  const retryAfter = Number(res.headers.get('retry-after'));
  expect(retryAfter).toBeGreaterThan(0);
  expect(retryAfter).toBeLessThanOrEqual(most);
}

/** A new person (named `name`) who owns a new client (`orgName`) besides their default one. */
export async function clientOwner(server: TestServer, name = 'Olga', orgName = 'Team') {
  const user = await createUser(server, { name });
  const created = await client(server.url).post<CreatedClient>(
    '/v1/clients',
    { name: orgName },
    { token: user.session },
  );
  expect(created.status).toBe(200);
  return { user, clientId: created.body.id };
}

export async function mails(
  api: Api,
  to: string,
): Promise<{ to: string; subject: string; text: string; html: string }[]> {
  const res = await api.get<Page<DevMail>>('/dev/mail', { query: { to } });
  expect(res.status).toBe(200);
  return res.body.data;
}

/** The token of the newest mail's link to `{origin}{path}?token=…`. */
export async function tokenFromMail(api: Api, to: string, origin: string, path: string): Promise<string> {
  const [latest] = await mails(api, to);
  expect(latest, `a mail to ${to}`).toBeDefined();
  const escaped = `${origin}${path}`.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const m = new RegExp(`${escaped}\\?token=([A-Za-z0-9_%-]+)`).exec(latest!.text);
  expect(m, `link ${origin}${path} in: ${latest!.text}`).not.toBeNull();
  return decodeURIComponent(m![1]!);
}

/** Registers through the API, verifies through the mailed link, signs in; returns the session. */
export async function signUp(server: TestServer, opts: { verify?: boolean; email?: string } = {}) {
  const api = client(server.url);
  const email = opts.email ?? newEmail();
  const reg = await api.post<{ user: UserRow }>('/v1/register', {
    email,
    name: 'Ada Example',
    password: STRONG_PASSWORD,
  });
  expect(reg.status).toBe(200);
  if (opts.verify !== false) {
    const token = await tokenFromMail(api, email, server.v2Url, '/account/verify');
    expect((await api.post('/v1/email/verify', { token })).status).toBe(200);
  }
  const login = await api.post<{ session_token: string }>('/v1/login', { email, password: STRONG_PASSWORD });
  expect(login.status).toBe(200);
  return {
    api,
    email,
    password: STRONG_PASSWORD,
    userId: reg.body.user.id,
    session: login.body.session_token,
  };
}

/** A TOTP code as an authenticator app would show it, `offset` steps from now. */
export const totp = (secret: string, offset = 0): Promise<string> =>
  generate({ secret, epoch: Math.floor(Date.now() / 1000) + offset * 30 });

/** Turns 2FA on for a signed-in user; the enabling code uses the current step. */
export async function enableTwoFactor(api: Api, session: string) {
  const setup = await api.post<{ secret: string }>('/v1/2fa/setup', undefined, { token: session });
  expect(setup.status).toBe(200);
  const enable = await api.post<{ recovery_codes: string[] }>(
    '/v1/2fa/enable',
    { code: await totp(setup.body.secret) },
    { token: session },
  );
  expect(enable.status).toBe(200);
  return { secret: setup.body.secret, recoveryCodes: enable.body.recovery_codes };
}

/** Password step of a 2FA sign-in: returns the challenge token. */
export async function startChallenge(api: Api, email: string, password = STRONG_PASSWORD): Promise<string> {
  const res = await api.post<{ requires_2fa?: boolean; challenge_token: string }>('/v1/login', {
    email,
    password,
  });
  expect(res.status).toBe(200);
  expect(res.body.requires_2fa).toBe(true);
  return res.body.challenge_token;
}
