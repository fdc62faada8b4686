import { expect } from 'vitest';
import { SignJWT } from 'jose';
import { randomBytes } from 'node:crypto';
import { call, type CallResult } from './http.js';
import { createApiToken, createUser } from './fixtures.js';
import { revokeOwnToken } from '../../src/tokens/service.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import type { TestServer } from './server.js';
import type { DetailError } from './json.js';

// The common authentication checks every protected /v1 route must pass (STYLE: "one shared helper runs
// the common auth checks against every protected route"; CONTRACT §3, §4; Authentication 1–5):
//   no credential, a garbage bearer, an unknown svc_ token, a forged session JWT and a revoked svc_
//   token → 401 INVALID_TOKEN with WWW-Authenticate: Bearer;
//   session-only routes refuse a valid svc_ token, token-only routes refuse a valid session (401);
//   an unverified account → 403 EMAIL_NOT_VERIFIED (unless the route allows it);
//   a cookie-authenticated unsafe request from another site → 403 CSRF.
//
// Usage:  it('auth checks', () => assertAuthChecks(server, { method: 'POST', path: '/v1/tokens', body: {} },
//                                                  { accepts: 'session' }));

export interface ProtectedRoute {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  body?: unknown;
}

export interface AuthCheckOptions {
  /** Which credentials the route takes: "S only", "B", or "S|B" (default). */
  accepts?: 'session' | 'token' | 'both';
  /** Routes an unverified account may use (logout, resend, 2FA status: CONTRACT §4). */
  allowUnverified?: boolean;
}

const COOKIE = '__Host-svc_session';
/** Any answer of a protected route: a refusal carries the detail envelope (CONTRACT §3). */
type MaybeDetail = Partial<DetailError> | undefined;

function expectInvalidToken(res: CallResult<MaybeDetail>, what: string) {
  expect(res.status, `${what}: status`).toBe(401);
  expect(res.headers.get('www-authenticate'), `${what}: WWW-Authenticate`).toMatch(/^Bearer\b/);
  expect(res.body?.detail?.code, `${what}: code`).toBe('INVALID_TOKEN');
}

export async function assertAuthChecks(
  server: TestServer,
  route: ProtectedRoute,
  options: AuthCheckOptions = {},
): Promise<void> {
  const accepts = options.accepts ?? 'both';
  const send = (opts: { token?: string; cookie?: string; headers?: Record<string, string> }) =>
    call<MaybeDetail>(server.url, route.method, route.path, {
      ...opts,
      ...(route.body !== undefined ? { body: route.body } : {}),
    });
  const label = `${route.method} ${route.path}`;

  expectInvalidToken(await send({}), `${label} without a credential`);
  expectInvalidToken(await send({ token: 'garbage' }), `${label} with a garbage bearer`);
  expectInvalidToken(
    await send({ headers: { authorization: 'Basic Zm9vOmJhcg==' } }),
    `${label} with a non-bearer scheme`,
  );
  expectInvalidToken(
    await send({ token: `svc_${randomBytes(32).toString('base64url')}` }),
    `${label} with an unknown svc_ token`,
  );
  const forged = await new SignJWT({ sid: 'ses_forged' })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject('usr_forged')
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(randomBytes(32));
  expectInvalidToken(await send({ token: forged }), `${label} with a forged session`);

  const user = await createUser(server);
  const revoked = await createApiToken(server, user, user.orgKey, 'auth-check');
  await revokeOwnToken(server.deps.db, user.userId, revoked.id, SYSTEM_ORIGIN);
  expectInvalidToken(await send({ token: revoked.secret }), `${label} with a revoked svc_ token`);

  if (accepts === 'session') {
    const live = await createApiToken(server, user, user.orgKey, 'auth-check');
    const res = await send({ token: live.secret });
    expect(res.status, `${label} is session-only and must refuse an svc_ token`).toBe(401);
    expect(res.headers.get('www-authenticate'), `${label}: WWW-Authenticate`).toMatch(/^Bearer\b/);
  }
  if (accepts === 'token') {
    expectInvalidToken(
      await send({ token: user.session }),
      `${label} is token-only and must refuse a session`,
    );
  }

  if (accepts !== 'token' && !options.allowUnverified) {
    const unverified = await createUser(server, { verified: false });
    const res = await send({ token: unverified.session });
    expect(res.status, `${label} with an unverified account`).toBe(403);
    expect(res.body?.detail?.code).toBe('EMAIL_NOT_VERIFIED');
  }

  if (accepts !== 'token' && route.method !== 'GET') {
    const cookie = `${COOKIE}=${user.session}`;
    const crossOrigin = await send({ cookie, headers: { origin: 'https://evil.example' } });
    expect(crossOrigin.status, `${label}: cookie POST from another origin`).toBe(403);
    expect(crossOrigin.body?.detail?.code).toBe('CSRF');
    const crossSite = await send({ cookie, headers: { 'sec-fetch-site': 'cross-site' } });
    expect(crossSite.status, `${label}: cookie POST with Sec-Fetch-Site cross-site`).toBe(403);
    expect(crossSite.body?.detail?.code).toBe('CSRF');
  }
}
