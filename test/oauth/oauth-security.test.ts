import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import * as oauth from 'oauth4webapi';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { driveConsent, sessionCookie } from '../helpers/oauth.js';
import { verifyAccessToken } from '../../oauth/verify.js';
import { oauthCodes, oauthRefreshTokens } from '../../src/db/schema.js';
import { hmacSecret } from '../../src/crypto/hash.js';
import { findRefreshToken, REUSE_GRACE_SECONDS } from '../../oauth/refresh.js';
import { issueApproval } from '../../oauth/token-issue.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import { AppError } from '../../src/http/errors.js';
import { anyOf, jsonAs, type JsonObject } from '../helpers/json.js';

// The RFC 9700 (OAuth security BCP) list as tests, plus the consent page's own rules (CONTRACT §4) and
// token-endpoint error paths. The device grant is in oauth-device.test.ts.

let server: TestServer;
let user: TestUser;
let as: oauth.AuthorizationServer;
const insecure = { [oauth.allowInsecureRequests]: true } as const;
const cli = { client_id: 'svc-cli' };
const REDIRECT = 'http://127.0.0.1:43123/callback';

beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
  as = await oauth.processDiscoveryResponse(
    new URL(server.v2Url),
    await oauth.discoveryRequest(new URL(server.v2Url), { algorithm: 'oauth2', ...insecure }),
  );
});
afterAll(async () => {
  await server?.close();
});

const json = (res: Response) => jsonAs<JsonObject>(res);
/** A token endpoint answer that carries both tokens (RFC 6749 §5.1). */
const tokensOf = (res: Response) =>
  jsonAs<{ access_token: string; refresh_token: string; grants?: unknown }>(res);
/** A dynamic registration answer (RFC 7591 §3.2.1). */
const registered = (res: Response) => jsonAs<{ client_id: string }>(res);

function authorizeUrl(params: Record<string, string | undefined>, origin = server.v2Url): string {
  const url = new URL('/oauth/authorize', origin);
  for (const [k, v] of Object.entries(params)) if (v !== undefined) url.searchParams.set(k, v);
  return url.href;
}

async function pkcePair() {
  const verifier = oauth.generateRandomCodeVerifier();
  return { verifier, challenge: await oauth.calculatePKCECodeChallenge(verifier) };
}

async function approvedCode(opts: { redirectUri?: string; origin?: string } = {}) {
  const { verifier, challenge } = await pkcePair();
  const redirectUri = opts.redirectUri ?? REDIRECT;
  const url = authorizeUrl(
    {
      client_id: 'svc-cli',
      redirect_uri: redirectUri,
      response_type: 'code',
      code_challenge: challenge,
      code_challenge_method: 'S256',
      state: 's1',
    },
    opts.origin,
  );
  const consent = await driveConsent(url, user.session);
  const location = new URL(consent.location!);
  return { code: location.searchParams.get('code')!, location, verifier, redirectUri };
}

function exchange(code: string, verifier: string | undefined, redirectUri = REDIRECT, origin = server.v2Url) {
  const body = new URLSearchParams({
    grant_type: 'authorization_code',
    code,
    redirect_uri: redirectUri,
    client_id: 'svc-cli',
  });
  if (verifier !== undefined) body.set('code_verifier', verifier);
  return fetch(`${origin}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body,
  });
}

async function noRedirect(url: string) {
  const res = await fetch(url, { headers: { cookie: sessionCookie(user.session) }, redirect: 'manual' });
  expect(res.status).toBe(400);
  expect(res.headers.get('location')).toBeNull();
  expect(res.headers.get('content-type')).toContain('text/html');
}

describe('redirect URIs (RFC 9700 §4.1, §4.11)', () => {
  it('never redirects on a redirect_uri mismatch or an unknown client', async () => {
    const { challenge } = await pkcePair();
    const base = {
      client_id: 'svc-cli',
      response_type: 'code',
      code_challenge: challenge,
      code_challenge_method: 'S256',
    };
    for (const redirect of [
      'https://evil.example/callback',
      'http://127.0.0.1:43123/callback/../evil',
      'http://127.0.0.1:43123/other',
      'http://127.0.0.1:43123/callback?next=https://evil.example',
      'http://localhost.evil.example/callback',
      'http://127.0.0.1.evil.example/callback',
      'https://127.0.0.1/callback',
      'http://127.0.0.1:43123/callback#frag',
      'javascript:alert(1)',
    ]) {
      await noRedirect(authorizeUrl({ ...base, redirect_uri: redirect }));
    }
    await noRedirect(authorizeUrl({ ...base, redirect_uri: undefined }));
    await noRedirect(authorizeUrl({ ...base, client_id: 'no-such-client', redirect_uri: REDIRECT }));
  });

  it('accepts any loopback port for a loopback registration (RFC 8252 §7.3) and exact URIs for DCR clients', async () => {
    for (const redirect of [
      'http://127.0.0.1:1/callback',
      'http://[::1]:65000/callback',
      'http://localhost:8080/callback',
    ]) {
      const { code } = await approvedCode({ redirectUri: redirect });
      expect(code).toBeTruthy();
    }
    const reg = await registered(
      await fetch(`${server.v2Url}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          redirect_uris: ['https://app.example/cb'],
          token_endpoint_auth_method: 'none',
        }),
      }),
    );
    const { challenge } = await pkcePair();
    const base = {
      client_id: reg.client_id,
      response_type: 'code',
      code_challenge: challenge,
      code_challenge_method: 'S256',
    };
    for (const redirect of [
      'https://app.example/cb/',
      'https://app.example/CB',
      'https://app.example:444/cb',
      'https://app.example.evil/cb',
    ]) {
      await noRedirect(authorizeUrl({ ...base, redirect_uri: redirect }));
    }
  });
});

describe('PKCE (RFC 7636; RFC 9700 §2.1.1)', () => {
  it('refuses a missing or plain code_challenge with a redirect carrying error, state and iss', async () => {
    const { challenge, verifier } = await pkcePair();
    for (const params of [
      { code_challenge: undefined, code_challenge_method: undefined },
      { code_challenge: verifier, code_challenge_method: 'plain' },
      { code_challenge: challenge, code_challenge_method: undefined },
    ]) {
      const res = await fetch(
        authorizeUrl({
          client_id: 'svc-cli',
          redirect_uri: REDIRECT,
          response_type: 'code',
          state: 'st',
          ...params,
        }),
        {
          redirect: 'manual',
        },
      );
      expect(res.status).toBe(302);
      const loc = new URL(res.headers.get('location')!);
      expect(loc.origin + loc.pathname).toBe(REDIRECT);
      expect(loc.searchParams.get('error')).toBe('invalid_request');
      expect(loc.searchParams.get('state')).toBe('st');
      expect(loc.searchParams.get('iss')).toBe(server.v2Url);
    }
  });

  it('refuses a wrong or missing verifier and burns the code', async () => {
    const a = await approvedCode();
    const wrong = await exchange(a.code, oauth.generateRandomCodeVerifier());
    expect(wrong.status).toBe(400);
    expect((await json(wrong)).error).toBe('invalid_grant');
    expect((await exchange(a.code, a.verifier)).status).toBe(400);
    const b = await approvedCode();
    expect((await json(await exchange(b.code, undefined))).error).toBe('invalid_grant');
  });
});

describe('authorization codes', () => {
  it('revokes what a code issued when the code is replayed (RFC 9700 §4.5)', async () => {
    const { code, verifier } = await approvedCode();
    const first = await tokensOf(await exchange(code, verifier));
    expect(first.access_token).toBeTruthy();
    const opts = { resource: 'platform' as const, origin: server.v2Url };
    expect((await verifyAccessToken(server.deps, first.access_token, opts)).userId).toBe(user.userId);
    const replay = await exchange(code, verifier);
    expect(replay.status).toBe(400);
    expect((await json(replay)).error).toBe('invalid_grant');
    await expect(verifyAccessToken(server.deps, first.access_token, opts)).rejects.toMatchObject({
      status: 401,
    });
    const model = (first.grants as { scope: string; access_token: string }[]).find(
      (g) => g.scope === 'model account', // svc-cli's /v1 grant (CONTRACT §7)
    )!;
    await expect(
      verifyAccessToken(server.deps, model.access_token, { resource: 'model', origin: server.v2Url }),
    ).rejects.toBeInstanceOf(AppError);
  });

  it('treats two racing exchanges of one code as a replay: nothing usable comes out', async () => {
    const { code, verifier } = await approvedCode();
    const responses = await Promise.all([exchange(code, verifier), exchange(code, verifier)]);
    const bodies = await Promise.all(
      responses.map((r) => jsonAs<{ error?: string; access_token?: string }>(r)),
    );
    // At most one exchange is answered with tokens, and since the code was presented twice, whatever
    // it issued is dead (revoked, or never committed when the replay landed mid-issuance).
    expect(responses.filter((r) => r.status === 200).length).toBeLessThanOrEqual(1);
    expect(bodies.some((b) => b.error === 'invalid_grant')).toBe(true);
    for (const b of bodies.filter((b) => b.access_token)) {
      await expect(
        verifyAccessToken(server.deps, b.access_token!, { resource: 'platform', origin: server.v2Url }),
      ).rejects.toMatchObject({ status: 401 });
    }
  });

  it('expires after 60 seconds and is bound to its redirect_uri and issuer', async () => {
    const a = await approvedCode();
    await server.deps.db
      .update(oauthCodes)
      .set({ expiresAt: new Date(Date.now() - 1000) })
      .where(eq(oauthCodes.clientId, 'svc-cli'));
    expect((await json(await exchange(a.code, a.verifier))).error).toBe('invalid_grant');
    const b = await approvedCode();
    expect((await json(await exchange(b.code, b.verifier, 'http://127.0.0.1:43124/callback'))).error).toBe(
      'invalid_request',
    );
    const c = await approvedCode();
    expect((await json(await exchange(c.code, c.verifier, REDIRECT, server.lightUrl))).error).toBe(
      'invalid_grant',
    );
  });

  it('stores codes only as an HMAC', async () => {
    const { code } = await approvedCode();
    const rows = await server.deps.db.select().from(oauthCodes);
    expect(JSON.stringify(rows)).not.toContain(code);
  });
});

describe('mix-up defence (RFC 9207)', () => {
  it('puts iss on the response, and a client that talked to another issuer rejects it', async () => {
    const { location } = await approvedCode();
    expect(location.searchParams.get('iss')).toBe(server.v2Url);
    const light = await oauth.processDiscoveryResponse(
      new URL(server.lightUrl),
      await oauth.discoveryRequest(new URL(server.lightUrl), { algorithm: 'oauth2', ...insecure }),
    );
    expect(() => oauth.validateAuthResponse(light, cli, location, 's1')).toThrow();
    expect(oauth.validateAuthResponse(as, cli, location, 's1').get('code')).toBeTruthy();
  });
});

describe('refresh token reuse (RFC 9700 §4.14)', () => {
  it('gives two parallel refreshes of one token the same successor, and revokes the grant on a later replay', async () => {
    const { code, verifier } = await approvedCode();
    const first = await tokensOf(await exchange(code, verifier));
    const refresh = (rt: string) =>
      fetch(`${server.v2Url}/oauth/token`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: rt, client_id: 'svc-cli' }),
      });
    const [a, b] = await Promise.all([refresh(first.refresh_token), refresh(first.refresh_token)]);
    expect([a.status, b.status]).toEqual([200, 200]);
    const [ja, jb] = [await tokensOf(a), await tokensOf(b)];
    expect(ja.refresh_token).toBe(jb.refresh_token);
    // The successor moves on; the first token coming back now is theft: the whole grant goes.
    const next = await tokensOf(await refresh(ja.refresh_token));
    expect(next.refresh_token).toBeTruthy();
    const replay = await refresh(first.refresh_token);
    expect(replay.status).toBe(400);
    expect((await json(replay)).error).toBe('invalid_grant');
    expect((await refresh(next.refresh_token)).status).toBe(400);
    await expect(
      verifyAccessToken(server.deps, next.access_token, { resource: 'platform', origin: server.v2Url }),
    ).rejects.toMatchObject({ status: 401 });
  });

  // The find rotates the token in the same statement when the request can only succeed (oauth/refresh.ts
  // findRefreshToken). A request refused after it must leave the token as it was: used up, it would make
  // the rightful client's next refresh (after the grace window) look like a replay.
  const refreshWith = (rt: string, extra: Record<string, string> = {}, origin = server.v2Url) =>
    fetch(`${origin}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'refresh_token',
        refresh_token: rt,
        client_id: 'svc-cli',
        ...extra,
      }),
    });
  const rotatedAt = async (rt: string) => {
    const [row] = await server.deps.db
      .select({ rotatedAt: oauthRefreshTokens.rotatedAt })
      .from(oauthRefreshTokens)
      .where(eq(oauthRefreshTokens.tokenHash, hmacSecret(server.deps.keys.hmac, rt)));
    return row?.rotatedAt;
  };

  it('leaves a refresh token unused when the request is refused for its client, resource, scope or issuer', async () => {
    const { code, verifier } = await approvedCode();
    const first = await tokensOf(await exchange(code, verifier));
    const other = await registered(
      await fetch(`${server.v2Url}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          client_name: 'Other',
          redirect_uris: ['http://127.0.0.1/cb'],
          token_endpoint_auth_method: 'none',
          grant_types: ['authorization_code', 'refresh_token'],
        }),
      }),
    );
    const refused = [
      await refreshWith(first.refresh_token, { client_id: other.client_id }),
      await refreshWith(first.refresh_token, { resource: `${server.v2Url}/v1` }),
      await refreshWith(first.refresh_token, { scope: 'model' }),
      await refreshWith(first.refresh_token, {}, server.lightUrl),
    ];
    expect(await Promise.all(refused.map(async (r) => [r.status, (await json(r)).error]))).toEqual([
      [400, 'invalid_grant'],
      [400, 'invalid_target'],
      [400, 'invalid_scope'],
      [400, 'invalid_grant'],
    ]);
    expect(await rotatedAt(first.refresh_token)).toBeNull();
    const ok = await refreshWith(first.refresh_token);
    expect(ok.status).toBe(200);
    expect(await rotatedAt(first.refresh_token)).toBeInstanceOf(Date);
  });

  it('revokes the grant when a token rotated longer ago than the grace window comes back, its successor unused', async () => {
    const { code, verifier } = await approvedCode();
    const first = await tokensOf(await exchange(code, verifier));
    const next = await tokensOf(await refreshWith(first.refresh_token));
    // Inside the window the same successor comes back (a retry); past it, the old token is a replay.
    expect((await tokensOf(await refreshWith(first.refresh_token))).refresh_token).toBe(next.refresh_token);
    await server.deps.db
      .update(oauthRefreshTokens)
      .set({ rotatedAt: new Date(Date.now() - (REUSE_GRACE_SECONDS + 1) * 1000) })
      .where(eq(oauthRefreshTokens.tokenHash, hmacSecret(server.deps.keys.hmac, first.refresh_token)));
    const replay = await refreshWith(first.refresh_token);
    expect([replay.status, (await json(replay)).error]).toEqual([400, 'invalid_grant']);
    expect((await refreshWith(next.refresh_token)).status).toBe(400);
    await expect(
      verifyAccessToken(server.deps, next.access_token, { resource: 'platform', origin: server.v2Url }),
    ).rejects.toMatchObject({ status: 401 });
  });
  it("takes a scope within the grant's, refuses one beyond it without using the token up", async () => {
    const { top } = await issueApproval(server.deps, {
      clientId: 'svc-cli',
      userId: user.userId,
      orgKey: user.orgKey,
      issuer: server.v2Url,
      resources: ['model'],
      scope: 'model account',
      named: null,
      auditOrigin: SYSTEM_ORIGIN,
    });
    for (const scope of ['model platform', 'model "account"', '']) {
      const refused = await refreshWith(top.refresh_token, { scope });
      expect([refused.status, (await json(refused)).error]).toEqual([400, 'invalid_scope']);
    }
    expect(await rotatedAt(top.refresh_token)).toBeNull();
    const narrowed = await refreshWith(top.refresh_token, { scope: 'model' });
    expect(narrowed.status).toBe(200);
    expect(await json(narrowed)).toMatchObject({ scope: 'model account', token_type: 'Bearer' });
    expect(await rotatedAt(top.refresh_token)).toBeInstanceOf(Date);
  });

  it('rotates a token once when several refreshes race with it: one successor, answered to all', async () => {
    const { top, grants } = await issueApproval(server.deps, {
      clientId: 'svc-cli',
      userId: user.userId,
      orgKey: user.orgKey,
      issuer: server.v2Url,
      resources: ['platform'],
      named: null,
      auditOrigin: SYSTEM_ORIGIN,
    });
    const answers = await Promise.all([1, 2, 3].map(() => refreshWith(top.refresh_token)));
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
    const successors = new Set(
      await Promise.all(answers.map(async (r) => (await tokensOf(r)).refresh_token)),
    );
    expect(successors.size).toBe(1);
    const [grant] = await server.deps.db
      .select({ grantId: oauthRefreshTokens.grantId })
      .from(oauthRefreshTokens)
      .where(eq(oauthRefreshTokens.tokenHash, hmacSecret(server.deps.keys.hmac, top.refresh_token)));
    const family = await server.deps.db
      .select({ tokenHash: oauthRefreshTokens.tokenHash })
      .from(oauthRefreshTokens)
      .where(eq(oauthRefreshTokens.grantId, grant!.grantId));
    expect(family).toHaveLength(2);
    expect(grants).toHaveLength(1);
  });

  // Refreshes that reach the database together go in one statement (oauth/refresh.ts redeemBatcher, on src/db/batch.ts): each must be
  // decided as if it had gone alone.
  it('redeems refreshes arriving together in one statement, each for its own request', async () => {
    const issue = async () =>
      (
        await issueApproval(server.deps, {
          clientId: 'svc-cli',
          userId: user.userId,
          orgKey: user.orgKey,
          issuer: server.v2Url,
          resources: ['platform'],
          named: null,
          auditOrigin: SYSTEM_ORIGIN,
        })
      ).top.refresh_token;
    const [a, b, c, d] = [await issue(), await issue(), await issue(), await issue()];
    const request = (clientId = 'svc-cli') => ({
      issuer: server.v2Url,
      clientId,
      resource: null,
      rotate: true,
    });
    // The first goes at once; the others wait for it and then go together.
    const [ra, rb, rc1, rc2, rd, unknown] = await Promise.all([
      findRefreshToken(server.deps, a, request()),
      findRefreshToken(server.deps, b, request()),
      findRefreshToken(server.deps, c, request()),
      findRefreshToken(server.deps, c, request()),
      findRefreshToken(server.deps, d, request('another-client')),
      findRefreshToken(server.deps, `srt_${'x'.repeat(43)}`, request()),
    ]);
    expect([ra, rb].map((r) => r?.rotatedNow)).toEqual([true, true]);
    expect(ra!.grant.id).not.toBe(rb!.grant.id);
    // The same token twice: rotated for one of them; the other is decided as a lost race is (the handler
    // rotates it again, a no-op, and answers the same successor).
    expect([rc1, rc2].map((r) => r?.rotatedNow).sort()).toEqual([false, true]);
    // Another client's request rotates nothing (the handler then refuses it, as the test above shows).
    expect(rd?.rotatedNow).toBe(false);
    expect(await rotatedAt(d)).toBeNull();
    expect(unknown).toBeNull();
    for (const rt of [a, b, c]) expect(await rotatedAt(rt)).toBeInstanceOf(Date);
  });
});

describe('consent page (CONTRACT §4)', () => {
  async function consentUrl() {
    const { challenge } = await pkcePair();
    return authorizeUrl({
      client_id: 'svc-cli',
      redirect_uri: REDIRECT,
      response_type: 'code',
      code_challenge: challenge,
      code_challenge_method: 'S256',
      state: 'x',
    });
  }

  it('sends a signed-out visitor to sign in and back', async () => {
    const url = await consentUrl();
    const res = await fetch(url, { redirect: 'manual' });
    expect(res.status).toBe(303);
    const loc = new URL(res.headers.get('location')!, server.v2Url);
    expect(loc.pathname).toBe('/account/login');
    expect(loc.searchParams.get('return_to')).toBe(url.slice(server.v2Url.length));
  });

  it('sends a signed-out POST (session expired while on the page) back to the same request, query kept', async () => {
    const url = await consentUrl();
    const res = await fetch(url, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'decision=approve',
    });
    expect(res.status).toBe(303);
    const loc = new URL(res.headers.get('location')!, server.v2Url);
    expect(loc.pathname).toBe('/account/login');
    expect(loc.searchParams.get('return_to')).toBe(url.slice(server.v2Url.length));
  });

  it('shows the client, its provenance, the resources and the organizations, under a strict CSP', async () => {
    const res = await fetch(await consentUrl(), { headers: { cookie: sessionCookie(user.session) } });
    expect(res.status).toBe(200);
    const page = await res.text();
    expect(page).toContain('svc command-line tool');
    expect(page).toContain(`${server.v2Url}/mcp/platform`);
    expect(page).toContain(`${server.v2Url}/v1`);
    expect(page).toContain(`<option value="${user.clientId}" selected>`);
    expect(page).toMatch(/name="decision" value="approve"/);
    const csp = res.headers.get('content-security-policy')!;
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).toMatch(/form-action 'self' http:\/\/127\.0\.0\.1:43123/);
  });

  it('refuses a post without the CSRF field, or from another site (no code issued)', async () => {
    const url = await consentUrl();
    const forged = await driveConsent(url, user.session, { csrfOverride: 'A'.repeat(43) });
    expect(forged.postStatus).toBe(403);
    expect(forged.location).toBeUndefined();
    const page = await fetch(url, { headers: { cookie: sessionCookie(user.session) } });
    const csrf = /name="csrf_token" value="([^"]+)"/.exec(await page.text())![1]!;
    const cookie = /__Host-svc_csrf=([^;]+)/.exec(page.headers.get('set-cookie') ?? '')![1]!;
    const cross = await fetch(url, {
      method: 'POST',
      headers: {
        cookie: sessionCookie(user.session, cookie),
        'content-type': 'application/x-www-form-urlencoded',
        origin: 'https://evil.example',
      },
      body: new URLSearchParams({ csrf_token: csrf, decision: 'approve' }),
      redirect: 'manual',
    });
    expect(cross.status).toBe(403);
    expect(cross.headers.get('location')).toBeNull();
  });

  it('redirects a denial as access_denied with state and iss', async () => {
    const res = await driveConsent(await consentUrl(), user.session, { decision: 'deny' });
    const loc = new URL(res.location!);
    expect(loc.searchParams.get('error')).toBe('access_denied');
    expect(loc.searchParams.get('state')).toBe('x');
    expect(loc.searchParams.get('iss')).toBe(server.v2Url);
    expect(loc.searchParams.get('code')).toBeNull();
  });

  it('refuses an organization the user does not belong to', async () => {
    const stranger = await createUser(server);
    const res = await driveConsent(await consentUrl(), user.session, { org: stranger.clientId });
    expect(res.postStatus).toBe(403);
    expect(res.location).toBeUndefined();
  });

  it('refuses unknown resources and scopes with invalid_target / invalid_scope', async () => {
    const { challenge } = await pkcePair();
    const base = {
      client_id: 'svc-cli',
      redirect_uri: REDIRECT,
      response_type: 'code',
      code_challenge: challenge,
      code_challenge_method: 'S256',
    };
    const target = await fetch(authorizeUrl({ ...base, resource: 'https://evil.example/mcp' }), {
      redirect: 'manual',
    });
    expect(new URL(target.headers.get('location')!).searchParams.get('error')).toBe('invalid_target');
    const other = await fetch(authorizeUrl({ ...base, resource: `${server.lightUrl}/v1` }), {
      redirect: 'manual',
    });
    expect(new URL(other.headers.get('location')!).searchParams.get('error')).toBe('invalid_target');
    const scope = await fetch(authorizeUrl({ ...base, scope: 'admin' }), { redirect: 'manual' });
    expect(new URL(scope.headers.get('location')!).searchParams.get('error')).toBe('invalid_scope');
  });
});

describe('endpoint error paths (RFC 6749 §5.2 shapes)', () => {
  const form = (path: string, body: Record<string, string>, headers: Record<string, string> = {}) =>
    fetch(`${server.v2Url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
      body: new URLSearchParams(body),
    });

  it('answers token endpoint mistakes with the right error and no-store', async () => {
    const unsupported = await form('/oauth/token', {
      grant_type: 'password',
      client_id: 'svc-cli',
      username: 'a',
      password: 'b',
    });
    expect(unsupported.status).toBe(400);
    expect(unsupported.headers.get('cache-control')).toBe('no-store');
    expect(await json(unsupported)).toMatchObject({
      error: 'unsupported_grant_type',
      error_description: anyOf(String),
    });
    expect((await json(await form('/oauth/token', { client_id: 'svc-cli' }))).error).toBe('invalid_request');
    const asJson = await fetch(`${server.v2Url}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ grant_type: 'refresh_token', refresh_token: 'x', client_id: 'svc-cli' }),
    });
    expect((await json(asJson)).error).toBe('invalid_request');
    const unknownClient = await form('/oauth/token', {
      grant_type: 'refresh_token',
      refresh_token: 'srt_x',
      client_id: 'nobody',
    });
    expect(unknownClient.status).toBe(401);
    expect(unknownClient.headers.get('www-authenticate')).toMatch(/^Basic/);
    const publicWithSecret = await form('/oauth/token', {
      grant_type: 'refresh_token',
      refresh_token: 'srt_x',
      client_id: 'svc-cli',
      client_secret: 'guess',
    });
    expect(publicWithSecret.status).toBe(401);
    expect(
      (
        await json(
          await form('/oauth/token', {
            grant_type: 'refresh_token',
            refresh_token: 'srt_unknown',
            client_id: 'svc-cli',
          }),
        )
      ).error,
    ).toBe('invalid_grant');
  });

  it('refuses revoke and introspect without a token, and the device grant for a client that did not register it', async () => {
    expect(await json(await form('/oauth/revoke', { client_id: 'svc-cli' }))).toMatchObject({
      error: 'invalid_request',
    });
    expect(await json(await form('/oauth/introspect', { client_id: 'svc-cli' }))).toMatchObject({
      error: 'invalid_request',
    });
    const reg = await registered(
      await fetch(`${server.v2Url}/oauth/register`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          redirect_uris: ['https://app.example/cb'],
          token_endpoint_auth_method: 'none',
        }),
      }),
    );
    const res = await form('/oauth/device_authorization', { client_id: reg.client_id });
    expect(res.status).toBe(400);
    expect(await json(res)).toMatchObject({ error: 'unauthorized_client' });
    expect((await form('/oauth/device_authorization', {})).status).toBe(401);
  });
});
