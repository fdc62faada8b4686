import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { queryRows } from '../../src/db/client.js';
import { mails, newEmail, signUp, tokenFromMail, type Api } from '../helpers/accounts-support.js';
import { anyOf, detailOf } from '../helpers/json.js';
import type { SignedIn } from '../helpers/answers.js';

// Password reset over real HTTP (CONTRACT §4): no account enumeration, single-use 1 h token, every
// session revoked on confirm.

let server: TestServer;
let api: Api;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

const NEW_PASSWORD = 'new-Battery-7';

describe('POST /v1/password/reset/request', () => {
  it('answers the same for a known and an unknown address, and mails only the known one', async () => {
    const { email } = await signUp(server);
    const ghost = newEmail('ghost');
    const known = await api.post('/v1/password/reset/request', { email: ` ${email.toUpperCase()}` });
    const unknown = await api.post('/v1/password/reset/request', { email: ghost });
    expect(known.status).toBe(200);
    expect(unknown.status).toBe(200);
    expect(unknown.body).toEqual(known.body);
    expect(known.body).toEqual({ message: anyOf(String) });

    const [mail] = await mails(api, email);
    expect(mail!.subject).toMatch(/reset/i);
    await tokenFromMail(api, email, server.v2Url, '/account/reset');
    expect(await mails(api, ghost)).toEqual([]);
  });

  it('limits requests per address (known or not) to five an hour: 429 RATE_LIMITED', async () => {
    for (const email of [(await signUp(server)).email, newEmail('ghost')]) {
      for (let i = 0; i < 5; i++)
        expect((await api.post('/v1/password/reset/request', { email })).status).toBe(200);
      const limited = await api.post('/v1/password/reset/request', { email });
      expect(limited.status).toBe(429);
      expect(detailOf(limited.body).code).toBe('RATE_LIMITED');
      expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    }
  });

  it('answers a malformed address with 400 VALIDATION_ERROR', async () => {
    const res = await api.post('/v1/password/reset/request', { email: 'nope' });
    expect(res.status).toBe(400);
    expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
  });
});

describe('POST /v1/password/reset/confirm', () => {
  it('sets the password once, revokes every session, and voids the other reset links', async () => {
    const { email, session, userId } = await signUp(server);
    const second = (await api.post<SignedIn>('/v1/login', { email, password: 'correct-Horse-9' })).body
      .session_token;
    await api.post('/v1/password/reset/request', { email });
    const older = await tokenFromMail(api, email, server.v2Url, '/account/reset');
    await api.post('/v1/password/reset/request', { email });
    const token = await tokenFromMail(api, email, server.v2Url, '/account/reset');
    expect(token).not.toBe(older);
    const ttl = await queryRows<{ ttl: number }>(
      server.deps.db,
      sql`select extract(epoch from expires_at - created_at)::int as ttl from account_tokens where purpose = 'reset_password' and user_id = ${userId} limit 1`,
    );
    expect(Math.abs(ttl[0]!.ttl - 3600)).toBeLessThan(5);

    // A weak password is refused without spending the token.
    const weak = await api.post('/v1/password/reset/confirm', { token, password: 'short' });
    expect(weak.status).toBe(400);
    expect(detailOf(weak.body).code).toBe('WEAK_PASSWORD');

    const ok = await api.post('/v1/password/reset/confirm', { token, password: NEW_PASSWORD });
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({
      message: anyOf(String),
      revoked: { sessions: 2, oauth_grants: 0 },
      api_tokens: { active: 0, message: anyOf(String) },
    });

    for (const s of [session, second])
      expect((await api.get('/v1/2fa/status', { token: s })).status).toBe(401);
    expect((await api.post('/v1/login', { email, password: 'correct-Horse-9' })).status).toBe(401);
    expect((await api.post('/v1/login', { email, password: NEW_PASSWORD })).status).toBe(200);

    const reused = await api.post('/v1/password/reset/confirm', { token, password: 'other-Pass-8' });
    expect(reused.status).toBe(400);
    expect(detailOf(reused.body).code).toBe('INVALID_RESET_TOKEN');
    expect(
      detailOf(
        (await api.post('/v1/password/reset/confirm', { token: older, password: 'other-Pass-8' })).body,
      ).code,
    ).toBe('INVALID_RESET_TOKEN');
  });

  it('refuses unknown and expired tokens, and a verification token, with 400 INVALID_RESET_TOKEN', async () => {
    expect(
      detailOf(
        (await api.post('/v1/password/reset/confirm', { token: 'made-up', password: NEW_PASSWORD })).body,
      ).code,
    ).toBe('INVALID_RESET_TOKEN');
    expect(
      detailOf((await api.post('/v1/password/reset/confirm', { password: NEW_PASSWORD })).body).code,
    ).toBe('VALIDATION_ERROR');

    const { email, userId } = await signUp(server);
    await api.post('/v1/password/reset/request', { email });
    const token = await tokenFromMail(api, email, server.v2Url, '/account/reset');
    await server.deps.db.execute(
      sql`update account_tokens set expires_at = now() - interval '1 second' where user_id = ${userId} and purpose = 'reset_password'`,
    );
    expect(
      detailOf((await api.post('/v1/password/reset/confirm', { token, password: NEW_PASSWORD })).body).code,
    ).toBe('INVALID_RESET_TOKEN');

    const fresh = newEmail('kind');
    await api.post('/v1/register', { email: fresh, name: 'K', password: 'correct-Horse-9' });
    const verifyToken = await tokenFromMail(api, fresh, server.v2Url, '/account/verify');
    expect(
      detailOf(
        (await api.post('/v1/password/reset/confirm', { token: verifyToken, password: NEW_PASSWORD })).body,
      ).code,
    ).toBe('INVALID_RESET_TOKEN');
  });

  it('verifies the address of an unverified account (the mail proved it)', async () => {
    const { email, session } = await signUp(server, { verify: false });
    await api.post('/v1/password/reset/request', { email });
    const token = await tokenFromMail(api, email, server.v2Url, '/account/reset');
    expect((await api.post('/v1/password/reset/confirm', { token, password: NEW_PASSWORD })).status).toBe(
      200,
    );
    expect((await api.get('/v1/2fa/status', { token: session })).status).toBe(401);
    const login = await api.post<SignedIn>('/v1/login', { email, password: NEW_PASSWORD });
    expect(login.body.user.email_verified).toBe(true);
  });
});

describe('sign-in failure limit (CONTRACT §1)', () => {
  it('refuses an e-mail after ten failures with 429 RATE_LIMITED and Retry-After, even with the right password', async () => {
    const { email } = await signUp(server);
    for (let i = 0; i < 10; i++) {
      const res = await api.post('/v1/login', { email, password: 'Wrong-password-1' });
      expect(res.status).toBe(401);
    }
    const limited = await api.post('/v1/login', { email, password: 'correct-Horse-9' });
    expect(limited.status).toBe(429);
    expect(detailOf(limited.body).code).toBe('RATE_LIMITED');
    const retryAfter = Number(limited.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(15 * 60);
    // Another identifier from the same address is not affected.
    const other = await signUp(server);
    expect((await api.post('/v1/login', { email: other.email, password: 'correct-Horse-9' })).status).toBe(
      200,
    );
  });

  it('a completed reset lifts the limit of that e-mail', async () => {
    const { email } = await signUp(server);
    for (let i = 0; i < 10; i++) await api.post('/v1/login', { email, password: 'Wrong-password-1' });
    expect((await api.post('/v1/login', { email, password: 'correct-Horse-9' })).status).toBe(429);
    await api.post('/v1/password/reset/request', { email });
    const token = await tokenFromMail(api, email, server.v2Url, '/account/reset');
    expect((await api.post('/v1/password/reset/confirm', { token, password: NEW_PASSWORD })).status).toBe(
      200,
    );
    expect((await api.post('/v1/login', { email, password: NEW_PASSWORD })).status).toBe(200);
  });
});
