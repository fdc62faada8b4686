import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createApiToken, createUser, STRONG_PASSWORD } from '../helpers/fixtures.js';
import { queryRows } from '../../src/db/client.js';
import { mails, newEmail, signUp, tokenFromMail, type Api } from '../helpers/accounts-support.js';
import { anyOf, containing, detailOf, matching } from '../helpers/json.js';
import type { Registered, SignedIn, VerifyResent } from '../helpers/answers.js';

// Registration, e-mail verification, login and logout over real HTTP (CONTRACT §4).

let server: TestServer;
let api: Api;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

describe('POST /v1/register', () => {
  it('creates the account and its default client, and mails a verification link on V2_URL', async () => {
    const email = newEmail('reg');
    const res = await api.post<Registered>('/v1/register', {
      email: `  ${email.toUpperCase()} `,
      name: ' Ada ',
      password: STRONG_PASSWORD,
    });
    expect(res.status).toBe(200);
    expect(res.body.user).toEqual({
      id: matching(/^usr_[a-z2-7]{26}$/),
      email,
      name: 'Ada',
      email_verified: false,
      two_factor_enabled: false,
      created_at: anyOf(Number),
    });
    expect(res.body.client).toEqual({
      id: matching(/^client_/),
      name: "Ada's personal organization",
      role: 'owner',
      owner_id: res.body.user.id,
      created_at: anyOf(Number),
    });
    expect(res.body.message).toEqual(anyOf(String));
    expect(JSON.stringify(res.body)).not.toMatch(/password|hash/i);

    const [mail] = await mails(api, email);
    expect(mail!.subject).toMatch(/verify/i);
    expect(mail!.html).toContain(`${server.v2Url}/account/verify?token=`);
    const token = await tokenFromMail(api, email, server.v2Url, '/account/verify');
    // The token is stored as an HMAC only.
    const stored = await queryRows<{ token_hash: string; ttl: number }>(
      server.deps.db,
      sql`select token_hash, extract(epoch from expires_at - created_at)::int as ttl from account_tokens where purpose = 'verify_email' and user_id = ${res.body.user.id}`,
    );
    expect(stored).toHaveLength(1);
    expect(stored[0]!.token_hash).not.toBe(token);
    expect(Math.abs(stored[0]!.ttl - 24 * 3600)).toBeLessThan(5);
  });

  it('refuses a taken e-mail (trimmed, case-insensitive) with 409 EMAIL_TAKEN', async () => {
    const email = newEmail('taken');
    expect((await api.post('/v1/register', { email, name: 'A', password: STRONG_PASSWORD })).status).toBe(
      200,
    );
    const again = await api.post('/v1/register', {
      email: ` ${email.toUpperCase()}`,
      name: 'B',
      password: STRONG_PASSWORD,
    });
    expect(again.status).toBe(409);
    expect(detailOf(again.body).code).toBe('EMAIL_TAKEN');
  });

  it.each([
    ['too short', 'a1!bcde'],
    ['no number', 'abcdefgh!'],
    ['no letter', '12345678!'],
    ['no special character', 'abcdefgh1'],
  ])('refuses a weak password (%s) with 400 WEAK_PASSWORD', async (_why, password) => {
    const res = await api.post('/v1/register', { email: newEmail('weak'), name: 'W', password });
    expect(res.status).toBe(400);
    expect(detailOf(res.body).code).toBe('WEAK_PASSWORD');
  });

  it('answers malformed input with 400 VALIDATION_ERROR naming each field', async () => {
    const res = await api.post('/v1/register', { email: 'not-an-email', password: STRONG_PASSWORD });
    expect(res.status).toBe(400);
    expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
    expect(
      detailOf(res.body)
        .errors!.map((e) => e.path)
        .sort(),
    ).toEqual(['email', 'name']);
  });
});

describe('e-mail verification', () => {
  it('lets an unverified account sign in, read 2FA status and resend, and nothing else (403 EMAIL_NOT_VERIFIED)', async () => {
    const { email, session } = await signUp(server, { verify: false });
    expect((await api.get('/v1/2fa/status', { token: session })).status).toBe(200);
    const blocked = await api.post('/v1/2fa/setup', undefined, { token: session });
    expect(blocked.status).toBe(403);
    expect(detailOf(blocked.body).code).toBe('EMAIL_NOT_VERIFIED');

    const resend = await api.post<VerifyResent>('/v1/email/verify/resend', undefined, { token: session });
    expect(resend.status).toBe(200);
    expect(resend.body.sent).toBe(true);
    expect(await mails(api, email)).toHaveLength(2);

    const token = await tokenFromMail(api, email, server.v2Url, '/account/verify');
    const verified = await api.post('/v1/email/verify', { token });
    expect(verified.status).toBe(200);
    expect(verified.body).toEqual({ verified: true });
    // The same session may now use the rest of the API.
    expect((await api.post('/v1/2fa/setup', undefined, { token: session })).status).toBe(200);
    // Once verified there is nothing to resend.
    expect(
      (await api.post<VerifyResent>('/v1/email/verify/resend', undefined, { token: session })).body.sent,
    ).toBe(false);
  });

  it('accepts a verification token once (400 INVALID_VERIFICATION_TOKEN after), and refuses unknown or expired ones', async () => {
    const email = newEmail('once');
    await api.post('/v1/register', { email, name: 'O', password: STRONG_PASSWORD });
    const token = await tokenFromMail(api, email, server.v2Url, '/account/verify');
    expect((await api.post('/v1/email/verify', { token })).status).toBe(200);
    const reused = await api.post('/v1/email/verify', { token });
    expect(reused.status).toBe(400);
    expect(detailOf(reused.body).code).toBe('INVALID_VERIFICATION_TOKEN');
    expect(detailOf((await api.post('/v1/email/verify', { token: 'nonsense' })).body).code).toBe(
      'INVALID_VERIFICATION_TOKEN',
    );
    expect(detailOf((await api.post('/v1/email/verify', {})).body).code).toBe('VALIDATION_ERROR');

    const late = newEmail('late');
    await api.post('/v1/register', { email: late, name: 'L', password: STRONG_PASSWORD });
    const lateToken = await tokenFromMail(api, late, server.v2Url, '/account/verify');
    await server.deps.db.execute(
      sql`update account_tokens set expires_at = now() - interval '1 second' where user_id = (select id from users where email = ${late})`,
    );
    expect(detailOf((await api.post('/v1/email/verify', { token: lateToken })).body).code).toBe(
      'INVALID_VERIFICATION_TOKEN',
    );
  });

  it('resend needs a session: none 401, API token 401 INVALID_TOKEN', async () => {
    expect((await api.post('/v1/email/verify/resend')).status).toBe(401);
    const user = await createUser(server);
    const { secret } = await createApiToken(server, user, user.orgKey);
    const res = await api.post('/v1/email/verify/resend', undefined, { token: secret });
    expect(res.status).toBe(401);
    expect(detailOf(res.body)).toEqual({ code: 'INVALID_TOKEN', message: 'invalid token' });
  });
});

describe('POST /v1/login', () => {
  it('returns {user, message, session_token} and sets the __Host- session cookie', async () => {
    const { email } = await signUp(server);
    const res = await api.post<SignedIn>('/v1/login', {
      email: ` ${email.toUpperCase()} `,
      password: STRONG_PASSWORD,
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      user: containing({ email, email_verified: true, two_factor_enabled: false }),
      message: anyOf(String),
      session_token: matching(/^[\w-]+\.[\w-]+\.[\w-]+$/),
    });
    const cookie = res.headers.get('set-cookie')!;
    expect(cookie).toMatch(new RegExp(`^__Host-svc_session=${res.body.session_token};`));
    for (const attr of [/; Path=\//, /; HttpOnly/, /; Secure/, /; SameSite=Lax/i, /; Max-Age=43200/])
      expect(cookie).toMatch(attr);
    expect(cookie).not.toMatch(/Domain=/i);
    // Both forms of the session authenticate.
    expect(
      (await api.get('/v1/2fa/status', { cookie: `__Host-svc_session=${res.body.session_token}` })).status,
    ).toBe(200);
    expect((await api.get('/v1/2fa/status', { token: res.body.session_token })).status).toBe(200);
  });

  it('answers a wrong password and an unknown e-mail the same: 401 INVALID_CREDENTIALS, in similar time', async () => {
    const { email } = await signUp(server);
    // The work each answer cost, as the CPU time of this process (the server runs in it; argon2's
    // threads count too): other processes on the machine change a request's wall time, not this.
    const timed = async (body: unknown) => {
      const before = process.cpuUsage();
      const res = await api.post('/v1/login', body);
      const { user, system } = process.cpuUsage(before);
      return { res, ms: (user + system) / 1000 };
    };
    const wrong = [] as number[];
    const unknown = [] as number[];
    for (let i = 0; i < 5; i++) {
      const a = await timed({ email, password: 'Wrong-password-1' });
      const b = await timed({ email: newEmail('ghost'), password: 'Wrong-password-1' });
      expect(a.res.status).toBe(401);
      expect(b.res.status).toBe(401);
      expect(b.res.body).toEqual(a.res.body);
      expect(detailOf(a.res.body).code).toBe('INVALID_CREDENTIALS');
      wrong.push(a.ms);
      unknown.push(b.ms);
    }
    // The cheapest of five is the intrinsic cost. Without the decoy hash an unknown e-mail skips the
    // argon2 work (tens of CPU-ms) and costs a fraction of a wrong password.
    expect(Math.min(...unknown)).toBeGreaterThan(Math.min(...wrong) * 0.5);
  });

  it('refuses a cross-site browser sign-in (login CSRF) with 403 CSRF, and allows the same origin', async () => {
    const { email } = await signUp(server);
    const body = { email, password: STRONG_PASSWORD };
    const foreign = await api.post('/v1/login', body, { headers: { origin: 'https://evil.example' } });
    expect(foreign.status).toBe(403);
    expect(detailOf(foreign.body).code).toBe('CSRF');
    expect(foreign.headers.get('set-cookie')).toBeNull();
    expect((await api.post('/v1/login', body, { headers: { 'sec-fetch-site': 'cross-site' } })).status).toBe(
      403,
    );
    expect(
      (
        await api.post(
          '/v1/2fa/login',
          { challenge_token: 'x', code: '1' },
          { headers: { origin: 'https://evil.example' } },
        )
      ).status,
    ).toBe(403);
    expect(
      (
        await api.post('/v1/login', body, {
          headers: { origin: server.url, 'sec-fetch-site': 'same-origin' },
        })
      ).status,
    ).toBe(200);
  });

  it('answers missing fields with 400 VALIDATION_ERROR', async () => {
    const res = await api.post('/v1/login', { email: 'x@example.test' });
    expect(res.status).toBe(400);
    expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
  });
});

describe('POST /v1/logout', () => {
  it('revokes the session and clears the cookie', async () => {
    const { session } = await signUp(server);
    const res = await api.post('/v1/logout', undefined, { token: session });
    expect(res.status).toBe(200);
    expect(res.headers.get('set-cookie')).toMatch(
      /^__Host-svc_session=;.*(Expires=Thu, 01 Jan 1970|Max-Age=0)/,
    );
    const after = await api.get('/v1/2fa/status', { token: session });
    expect(after.status).toBe(401);
    expect(detailOf(after.body).code).toBe('INVALID_TOKEN');
  });

  it('works for an unverified account', async () => {
    const { session } = await signUp(server, { verify: false });
    expect((await api.post('/v1/logout', undefined, { token: session })).status).toBe(200);
  });

  it('refuses no credential (401), an API token (401 INVALID_TOKEN) and a cross-site cookie request (403 CSRF)', async () => {
    expect((await api.post('/v1/logout')).status).toBe(401);
    const user = await createUser(server);
    const { secret } = await createApiToken(server, user, user.orgKey);
    expect(detailOf((await api.post('/v1/logout', undefined, { token: secret })).body).code).toBe(
      'INVALID_TOKEN',
    );
    const csrf = await api.post('/v1/logout', undefined, {
      cookie: `__Host-svc_session=${user.session}`,
      headers: { origin: 'https://evil.example' },
    });
    expect(csrf.status).toBe(403);
    expect(detailOf(csrf.body).code).toBe('CSRF');
    // The session survived the refused request.
    expect((await api.get('/v1/2fa/status', { token: user.session })).status).toBe(200);
  });

  it('refuses a cookie request whose Origin differs only in scheme (an origin is scheme, host and port)', async () => {
    // CONTRACT §4 "must come from the same origin"; RFC 6454 §4: https://h and http://h are two origins.
    const user = await createUser(server);
    const cookie = `__Host-svc_session=${user.session}`;
    const otherScheme = server.url.replace(/^http:/, 'https:');
    const refused = await api.post('/v1/logout', undefined, { cookie, headers: { origin: otherScheme } });
    expect(refused.status).toBe(403);
    expect(detailOf(refused.body).code).toBe('CSRF');
    const login = await api.post(
      '/v1/login',
      { email: user.email, password: STRONG_PASSWORD },
      { headers: { origin: otherScheme } },
    );
    expect(login.status).toBe(403);
    // The same origin, spelled with an upper-case host, is still the same origin.
    const same = await api.post('/v1/logout', undefined, {
      cookie,
      headers: { origin: server.url.toUpperCase().replace('HTTP:', 'http:') },
    });
    expect(same.status).toBe(200);
  });
});
