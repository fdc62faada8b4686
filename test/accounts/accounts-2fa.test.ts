import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createApiToken, createUser } from '../helpers/fixtures.js';
import { queryRows } from '../../src/db/client.js';
import { enableTwoFactor, signUp, startChallenge, totp, type Api } from '../helpers/accounts-support.js';
import { anyOf, containing, detailOf } from '../helpers/json.js';
import type { SignedIn, TwoFactorEnabled, TwoFactorSetup, TwoFactorStatus } from '../helpers/answers.js';

// TOTP two-factor authentication over real HTTP, codes made by otplib from the returned secret as an
// authenticator app would (CONTRACT §4).

let server: TestServer;
let api: Api;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

describe('setup and enable', () => {
  it('sets up, enables with a current code, and returns ten one-time recovery codes', async () => {
    const { session, email, userId } = await signUp(server);
    expect((await api.get('/v1/2fa/status', { token: session })).body).toEqual({
      enabled: false,
      recovery_codes_remaining: 0,
    });

    const setup = await api.post<TwoFactorSetup>('/v1/2fa/setup', undefined, { token: session });
    expect(setup.status).toBe(200);
    const { secret, otpauth_uri } = setup.body;
    expect(secret).toMatch(/^[A-Z2-7]{32}$/); // 20 bytes, base32
    const uri = new URL(otpauth_uri);
    expect(uri.protocol).toBe('otpauth:');
    expect(decodeURIComponent(uri.pathname)).toContain(email);
    expect(uri.searchParams.get('secret')).toBe(secret);
    expect(uri.searchParams.get('issuer')).toBe('svc');
    expect(uri.searchParams.get('digits') ?? '6').toBe('6');
    expect(uri.searchParams.get('period') ?? '30').toBe('30');
    expect((uri.searchParams.get('algorithm') ?? 'SHA1').toUpperCase()).toBe('SHA1');

    const wrong = await api.post('/v1/2fa/enable', { code: '000000' }, { token: session });
    expect(wrong.status).toBe(400);
    expect(detailOf(wrong.body).code).toBe('INVALID_CODE');

    const enable = await api.post<TwoFactorEnabled>(
      '/v1/2fa/enable',
      { code: await totp(secret) },
      { token: session },
    );
    expect(enable.status).toBe(200);
    expect(enable.body.enabled).toBe(true);
    const codes = enable.body.recovery_codes;
    expect(codes).toHaveLength(10);
    expect(new Set(codes).size).toBe(10);
    expect((await api.get('/v1/2fa/status', { token: session })).body).toEqual({
      enabled: true,
      recovery_codes_remaining: 10,
    });

    // At rest: the seed is encrypted, the recovery codes are hashes.
    const [row] = await queryRows<{ totp_secret_enc: string }>(
      server.deps.db,
      sql`select totp_secret_enc from users where id = ${userId}`,
    );
    expect(row!.totp_secret_enc).not.toContain(secret);
    const hashes = await queryRows<{ code_hash: string }>(
      server.deps.db,
      sql`select code_hash from recovery_codes where user_id = ${userId}`,
    );
    expect(hashes).toHaveLength(10);
    for (const c of codes) expect(hashes.map((h) => h.code_hash)).not.toContain(c);

    // 2FA on: a new setup or enable is refused until it is disabled.
    expect(detailOf((await api.post('/v1/2fa/setup', undefined, { token: session })).body).code).toBe(
      'TWO_FACTOR_ALREADY_ENABLED',
    );
    expect(
      (await api.post('/v1/2fa/enable', { code: await totp(secret, 1) }, { token: session })).status,
    ).toBe(409);
  });

  it('refuses enable before setup with 400 TWO_FACTOR_NOT_SET_UP and a missing code with 400 VALIDATION_ERROR', async () => {
    const { session } = await signUp(server);
    expect(
      detailOf((await api.post('/v1/2fa/enable', { code: '123456' }, { token: session })).body).code,
    ).toBe('TWO_FACTOR_NOT_SET_UP');
    expect(detailOf((await api.post('/v1/2fa/enable', {}, { token: session })).body).code).toBe(
      'VALIDATION_ERROR',
    );
  });

  it('takes a session only: no credential 401, an API token 401 INVALID_TOKEN, unverified 403', async () => {
    const user = await createUser(server);
    const { secret } = await createApiToken(server, user, user.orgKey);
    const routes: [string, string][] = [
      ['GET', '/v1/2fa/status'],
      ['POST', '/v1/2fa/setup'],
      ['POST', '/v1/2fa/enable'],
      ['POST', '/v1/2fa/disable'],
    ];
    const unverified = await createUser(server, { verified: false });
    for (const [method, path] of routes) {
      const send = (token?: string) =>
        method === 'GET' ? api.get(path, { token }) : api.post(path, { code: '123456' }, { token });
      const none = await send();
      expect(none.status, `${path} without credential`).toBe(401);
      expect(none.headers.get('www-authenticate')).toMatch(/^Bearer/);
      const bearer = await send(secret);
      expect(bearer.status, `${path} with an API token`).toBe(401);
      expect(detailOf(bearer.body)).toEqual({ code: 'INVALID_TOKEN', message: 'invalid token' });
      const unv = await send(unverified.session);
      if (path === '/v1/2fa/status') expect(unv.status).toBe(200);
      else expect(detailOf(unv.body).code, `${path} unverified`).toBe('EMAIL_NOT_VERIFIED');
    }
  });
});

describe('sign-in with 2FA', () => {
  it('asks for a second factor, then answers like a plain login; a used step is refused (no replay)', async () => {
    const { session, email } = await signUp(server);
    const { secret } = await enableTwoFactor(api, session);

    const first = await api.post<SignedIn>('/v1/login', { email, password: 'correct-Horse-9' });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({
      requires_2fa: true,
      challenge_token: anyOf(String),
      email,
      message: anyOf(String),
    });
    expect(first.headers.get('set-cookie')).toBeNull();

    // The enabling code used the current step; the next step is within ±1.
    const code = await totp(secret, 1);
    const done = await api.post<SignedIn>('/v1/2fa/login', {
      challenge_token: first.body.challenge_token,
      code,
    });
    expect(done.status).toBe(200);
    expect(done.body).toEqual({
      user: containing({ email, two_factor_enabled: true }),
      message: anyOf(String),
      session_token: anyOf(String),
    });
    expect(done.headers.get('set-cookie')).toMatch(/^__Host-svc_session=.+; .*HttpOnly/);
    expect((await api.get('/v1/2fa/status', { token: done.body.session_token })).status).toBe(200);

    // The challenge is spent, and the same code on a new challenge is a replay.
    expect(
      detailOf((await api.post('/v1/2fa/login', { challenge_token: first.body.challenge_token, code })).body)
        .code,
    ).toBe('INVALID_CHALLENGE');
    const replay = await api.post('/v1/2fa/login', {
      challenge_token: await startChallenge(api, email),
      code,
    });
    expect(replay.status).toBe(401);
    expect(detailOf(replay.body).code).toBe('INVALID_CODE');
    // So is the earlier step (the enabling code's step).
    const earlier = await api.post('/v1/2fa/login', {
      challenge_token: await startChallenge(api, email),
      code: await totp(secret),
    });
    expect(detailOf(earlier.body).code).toBe('INVALID_CODE');
  });

  it('accepts a recovery code once, in any case and spacing', async () => {
    const { session, email } = await signUp(server);
    const { recoveryCodes } = await enableTwoFactor(api, session);
    const typed = ` ${recoveryCodes[0]!.toUpperCase().replace('-', ' ')} `;
    const ok = await api.post('/v1/2fa/login', {
      challenge_token: await startChallenge(api, email),
      code: typed,
    });
    expect(ok.status).toBe(200);
    expect(
      (await api.get<TwoFactorStatus>('/v1/2fa/status', { token: session })).body.recovery_codes_remaining,
    ).toBe(9);
    const again = await api.post('/v1/2fa/login', {
      challenge_token: await startChallenge(api, email),
      code: recoveryCodes[0],
    });
    expect(again.status).toBe(401);
    expect(detailOf(again.body).code).toBe('INVALID_CODE');
  });

  it('lets exactly one of two simultaneous redemptions of one recovery code win', async () => {
    const { session, email } = await signUp(server);
    const { recoveryCodes } = await enableTwoFactor(api, session);
    const [a, b] = [await startChallenge(api, email), await startChallenge(api, email)];
    const results = await Promise.all([
      api.post('/v1/2fa/login', { challenge_token: a, code: recoveryCodes[3] }),
      api.post('/v1/2fa/login', { challenge_token: b, code: recoveryCodes[3] }),
    ]);
    expect(results.map((r) => r.status).sort()).toEqual([200, 401]);
    expect(
      (await api.get<TwoFactorStatus>('/v1/2fa/status', { token: session })).body.recovery_codes_remaining,
    ).toBe(9);
  });

  it('burns a challenge after five wrong codes, and refuses unknown and expired challenges', async () => {
    const { session, email } = await signUp(server);
    const { secret } = await enableTwoFactor(api, session);
    const challenge = await startChallenge(api, email);
    for (let i = 0; i < 5; i++) {
      const wrong = await api.post('/v1/2fa/login', { challenge_token: challenge, code: 'aaaaa-aaaaa' });
      expect(wrong.status).toBe(401);
      expect(detailOf(wrong.body).code).toBe('INVALID_CODE');
    }
    const burnt = await api.post('/v1/2fa/login', {
      challenge_token: challenge,
      code: await totp(secret, 1),
    });
    expect(burnt.status).toBe(401);
    expect(detailOf(burnt.body).code).toBe('INVALID_CHALLENGE');

    expect(
      detailOf((await api.post('/v1/2fa/login', { challenge_token: 'made-up', code: '123456' })).body).code,
    ).toBe('INVALID_CHALLENGE');

    const late = await startChallenge(api, email);
    const ttl = await queryRows<{ ttl: number }>(
      server.deps.db,
      sql`select extract(epoch from expires_at - created_at)::int as ttl from two_factor_challenges order by id desc limit 1`,
    );
    expect(Math.abs(ttl[0]!.ttl - 300)).toBeLessThan(5);
    await server.deps.db.execute(
      sql`update two_factor_challenges set expires_at = now() - interval '1 second' where consumed_at is null`,
    );
    expect(
      detailOf((await api.post('/v1/2fa/login', { challenge_token: late, code: await totp(secret, 1) })).body)
        .code,
    ).toBe('INVALID_CHALLENGE');
    expect(detailOf((await api.post('/v1/2fa/login', { challenge_token: late })).body).code).toBe(
      'VALIDATION_ERROR',
    );
  });

  it("sweeps the user's long-expired challenges when a new one starts", async () => {
    const { session, email, userId } = await signUp(server);
    await enableTwoFactor(api, session);
    await startChallenge(api, email);
    await server.deps.db.execute(
      sql`update two_factor_challenges set expires_at = now() - interval '2 hours' where user_id = ${userId}`,
    );
    await startChallenge(api, email);
    const rows = await queryRows<{ n: number }>(
      server.deps.db,
      sql`select count(*)::int as n from two_factor_challenges where user_id = ${userId}`,
    );
    expect(rows[0]!.n).toBe(1);
  });

  it('limits wrong codes per user across challenges: 429 RATE_LIMITED with Retry-After', async () => {
    const { session, email } = await signUp(server);
    await enableTwoFactor(api, session);
    for (let round = 0; round < 2; round++) {
      const challenge = await startChallenge(api, email);
      for (let i = 0; i < 5; i++)
        expect((await api.post('/v1/2fa/login', { challenge_token: challenge, code: '000000' })).status).toBe(
          401,
        );
    }
    const limited = await api.post('/v1/2fa/login', {
      challenge_token: await startChallenge(api, email),
      code: '000000',
    });
    expect(limited.status).toBe(429);
    expect(detailOf(limited.body).code).toBe('RATE_LIMITED');
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
  });
});

describe('disable', () => {
  it('turns 2FA off with a TOTP code; sign-in then needs the password only', async () => {
    const { session, email } = await signUp(server);
    const { secret } = await enableTwoFactor(api, session);
    const wrong = await api.post('/v1/2fa/disable', { code: '000000' }, { token: session });
    expect(wrong.status).toBe(400);
    expect(detailOf(wrong.body).code).toBe('INVALID_CODE');
    const off = await api.post('/v1/2fa/disable', { code: await totp(secret, 1) }, { token: session });
    expect(off.status).toBe(200);
    expect(off.body).toEqual({ enabled: false });
    expect((await api.get('/v1/2fa/status', { token: session })).body).toEqual({
      enabled: false,
      recovery_codes_remaining: 0,
    });
    const login = await api.post<SignedIn>('/v1/login', { email, password: 'correct-Horse-9' });
    expect(login.body.session_token).toEqual(anyOf(String));
    const again = await api.post('/v1/2fa/disable', { code: await totp(secret, 1) }, { token: session });
    expect(again.status).toBe(409);
    expect(detailOf(again.body).code).toBe('TWO_FACTOR_NOT_ENABLED');
  });

  it('turns 2FA off with a recovery code', async () => {
    const { session, userId } = await signUp(server);
    const { recoveryCodes } = await enableTwoFactor(api, session);
    const off = await api.post('/v1/2fa/disable', { code: recoveryCodes[9] }, { token: session });
    expect(off.status).toBe(200);
    expect(off.body).toEqual({ enabled: false });
    const [row] = await queryRows<{ n: number }>(
      server.deps.db,
      sql`select count(*)::int as n from recovery_codes where user_id = ${userId}`,
    );
    expect(row!.n).toBe(0);
    const [user] = await queryRows<{ enc: string | null }>(
      server.deps.db,
      sql`select totp_secret_enc as enc from users where id = ${userId}`,
    );
    expect(user!.enc).toBeNull();
  });
});
