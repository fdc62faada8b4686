import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as oauth from 'oauth4webapi';
import { SignJWT } from 'jose';
import { eq } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createApiToken } from '../helpers/fixtures.js';
import {
  discoverAuthorizationServer,
  driveConsent,
  insecureRequests,
  registerPublicClient,
} from '../helpers/oauth.js';
import { signUp, tokenFromMail } from '../helpers/accounts-support.js';
import { revokeCredentialsAfterPasswordChange } from '../../src/accounts/credential-revocation.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import { sessionSecretHash } from '../../src/auth/session.js';
import { sessions } from '../../src/db/schema.js';
import { matching } from '../helpers/json.js';
import type { ClientRow, Page } from '../helpers/answers.js';

/** The secret `sid` claim of a session JWT. */
const sidOf = (jwt: string): string =>
  (JSON.parse(Buffer.from(jwt.split('.')[1]!, 'base64url').toString()) as { sid: string }).sid;

// What a new password takes back (CONTRACT §7), over real HTTP with oauth4webapi as
// the third-party app: a reset revokes every session and every OAuth grant (access tokens stop working
// on /mcp/platform, refresh tokens stop refreshing, a code not yet exchanged is spent), and leaves svc_
// tokens working while the answer counts them. A change (the portal's route calls the same function)
// keeps the session that made it.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const insecure = insecureRequests;
const REDIRECT = 'http://127.0.0.1:9/callback';
const NEW_PASSWORD = 'new-Battery-7';

async function thirdPartyApp() {
  const as = await discoverAuthorizationServer(server.v2Url);
  const client = await registerPublicClient(as, { redirect_uris: [REDIRECT], client_name: 'Notes app' });
  return { as, client, clientAuth: oauth.None() };
}

type App = Awaited<ReturnType<typeof thirdPartyApp>>;

/** Authorize + consent as the signed-in user; returns the code's parameters and verifier (not exchanged). */
async function approve(app: App, session: string) {
  const verifier = oauth.generateRandomCodeVerifier();
  const url = new URL(app.as.authorization_endpoint!);
  url.searchParams.set('client_id', app.client.client_id);
  url.searchParams.set('redirect_uri', REDIRECT);
  url.searchParams.set('response_type', 'code');
  url.searchParams.set('code_challenge', await oauth.calculatePKCECodeChallenge(verifier));
  url.searchParams.set('code_challenge_method', 'S256');
  url.searchParams.set('resource', `${server.v2Url}/mcp/platform`);
  const consent = await driveConsent(url.href, session);
  expect(consent.postStatus).toBe(303);
  const params = oauth.validateAuthResponse(
    app.as,
    app.client,
    new URL(consent.location!),
    oauth.skipStateCheck,
  );
  return { params, verifier };
}

async function exchange(app: App, code: Awaited<ReturnType<typeof approve>>) {
  return oauth.authorizationCodeGrantRequest(
    app.as,
    app.client,
    app.clientAuth,
    code.params,
    REDIRECT,
    code.verifier,
    insecure,
  );
}

async function mcpStatus(accessToken: string): Promise<number> {
  const res = await fetch(`${server.v2Url}/mcp/platform`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${accessToken}`,
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
    }),
  });
  await res.text();
  return res.status;
}

async function refreshError(app: App, refreshToken: string): Promise<string | undefined> {
  const res = await oauth.refreshTokenGrantRequest(
    app.as,
    app.client,
    app.clientAuth,
    refreshToken,
    insecure,
  );
  try {
    await oauth.processRefreshTokenResponse(app.as, app.client, res);
    return undefined;
  } catch (err) {
    return (err as oauth.ResponseBodyError).error;
  }
}

describe('a password reset takes the account back', () => {
  it('revokes sessions and OAuth grants (access, refresh, unexchanged code); svc_ tokens stay and are counted', async () => {
    const user = await signUp(server);
    const api = user.api;
    const app = await thirdPartyApp();
    const tokens = await oauth.processAuthorizationCodeResponse(
      app.as,
      app.client,
      await exchange(app, await approve(app, user.session)),
    );
    const pendingCode = await approve(app, user.session);
    const orgKey = (await api.get<Page<ClientRow>>('/v1/clients', { token: user.session })).body.data[0]!.id;
    const apiToken = await createApiToken(server, user, orgKey.replace(/^client_/, ''));

    expect(await mcpStatus(tokens.access_token)).toBe(200);
    expect(await refreshError(app, tokens.refresh_token!)).toBeUndefined();
    const refreshed = await oauth.processRefreshTokenResponse(
      app.as,
      app.client,
      await oauth.refreshTokenGrantRequest(
        app.as,
        app.client,
        app.clientAuth,
        tokens.refresh_token!,
        insecure,
      ),
    );

    await api.post('/v1/password/reset/request', { email: user.email });
    const resetToken = await tokenFromMail(api, user.email, server.v2Url, '/account/reset');
    const confirmed = await api.post('/v1/password/reset/confirm', {
      token: resetToken,
      password: NEW_PASSWORD,
    });
    expect(confirmed.status).toBe(200);
    expect(confirmed.body).toEqual({
      message: matching(/every session was signed out/),
      revoked: { sessions: 1, oauth_grants: 1 },
      api_tokens: { active: 1, message: matching(/POST \/v1\/tokens\/revoke/) },
    });

    expect((await api.get('/v1/2fa/status', { token: user.session })).status).toBe(401);
    expect(await mcpStatus(refreshed.access_token)).toBe(401);
    expect(await refreshError(app, refreshed.refresh_token!)).toBe('invalid_grant');
    const late = await exchange(app, pendingCode);
    await expect(oauth.processAuthorizationCodeResponse(app.as, app.client, late)).rejects.toMatchObject({
      error: 'invalid_grant',
    });
    // The durable token is untouched: scripts and CI keep working.
    expect((await api.get('/v1/auth/verify', { token: apiToken.secret })).status).toBe(200);
  });

  it('the reset page sends the person to sign in with the count of svc_ tokens still active', async () => {
    const user = await signUp(server);
    const orgKey = (await user.api.get<Page<ClientRow>>('/v1/clients', { token: user.session })).body.data[0]!
      .id;
    await createApiToken(server, user, orgKey.replace(/^client_/, ''));
    await user.api.post('/v1/password/reset/request', { email: user.email });
    const resetToken = await tokenFromMail(user.api, user.email, server.v2Url, '/account/reset');
    const pageUrl = `${server.v2Url}/account/reset?token=${encodeURIComponent(resetToken)}`;
    const page = await fetch(pageUrl);
    const html = await page.text();
    const csrfCookie = /__Host-svc_csrf=([^;]+)/.exec(page.headers.get('set-cookie') ?? '')![1]!;
    const csrf = /name="csrf_token" value="([^"]+)"/.exec(html)![1]!;
    const post = await fetch(`${server.v2Url}/account/reset/confirm`, {
      method: 'POST',
      redirect: 'manual',
      headers: {
        'content-type': 'application/x-www-form-urlencoded',
        origin: server.v2Url,
        cookie: `__Host-svc_csrf=${csrfCookie}`,
      },
      body: new URLSearchParams({ csrf_token: csrf, token: resetToken, password: NEW_PASSWORD }).toString(),
    });
    expect(post.status).toBe(303);
    const location = post.headers.get('location')!;
    expect(location).toBe('/account/login?reset=1&api_tokens=1');
    const login = await (await fetch(new URL(location, server.v2Url))).text();
    expect(login).toContain('1 API token (svc_…) is still active');
    expect(login).toContain('every connected app disconnected');
  });
});

describe('a password change (the portal route calls revokeCredentialsAfterPasswordChange)', () => {
  it('keeps the session that made it, revokes every other and every grant', async () => {
    const user = await signUp(server);
    const other = (
      await user.api.post<{ session_token: string }>('/v1/login', {
        email: user.email,
        password: user.password,
      })
    ).body.session_token;
    const app = await thirdPartyApp();
    const tokens = await oauth.processAuthorizationCodeResponse(
      app.as,
      app.client,
      await exchange(app, await approve(app, other)),
    );
    // The handle of the session making the change, as the portal has it (principal.sessionId).
    const [row] = await server.deps.db
      .select({ id: sessions.id })
      .from(sessions)
      .where(eq(sessions.secretHash, sessionSecretHash(sidOf(user.session))));
    const revoked = await revokeCredentialsAfterPasswordChange(server.deps.db, user.userId, {
      origin: SYSTEM_ORIGIN,
      keepSessionId: row!.id,
    });
    expect(revoked).toEqual({ sessionsRevoked: 1, grantsRevoked: 1, activeApiTokens: 0 });
    expect((await user.api.get('/v1/2fa/status', { token: user.session })).status).toBe(200);
    expect((await user.api.get('/v1/2fa/status', { token: other })).status).toBe(401);
    expect(await mcpStatus(tokens.access_token)).toBe(401);
    expect(await refreshError(app, tokens.refresh_token!)).toBe('invalid_grant');
  });
});

describe('sessions are stored by the hash of their secret', () => {
  it('no column holds the sid of the JWT, and a JWT naming the public handle signs nobody in', async () => {
    const user = await signUp(server);
    const sid = sidOf(user.session);
    const rows = await server.deps.db.select().from(sessions).where(eq(sessions.userId, user.userId));
    expect(rows).toHaveLength(1);
    expect(JSON.stringify(rows)).not.toContain(sid);
    expect(rows[0]!.id).toMatch(/^ses_/);
    // Someone with a copy of the database and the session key signs a JWT for the row they see.
    const now = Math.floor(Date.now() / 1000);
    const forged = await new SignJWT({ sid: rows[0]!.id })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(user.userId)
      .setIssuedAt(now)
      .setExpirationTime(now + 600)
      .sign(server.deps.keys.session);
    expect((await user.api.get('/v1/2fa/status', { token: forged })).status).toBe(401);
    expect((await user.api.get('/v1/2fa/status', { token: user.session })).status).toBe(200);
  });
});
