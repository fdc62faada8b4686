import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createUser, type TestUser } from '../helpers/fixtures.js';
import { PageClient, csrfOf, hiddenOf } from '../helpers/page-client.js';
import { clientIdOf } from '../../src/ids.js';

// The layout over HTTP (security headers, CSRF cookie), the signed-out redirect with return_to and the
// dashboard. Sign-in, registration and reset flows are in portal-flows.test.ts.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

function signedIn(user: TestUser, base = server.url): PageClient {
  const browser = new PageClient(base);
  browser.jar.set('__Host-svc_session', user.session);
  return browser;
}

const PAGES = [
  '/account/login',
  '/account/register',
  '/account/reset',
  '/account/reset?token=abc',
  '/account/verify?token=nope',
];

describe('every page: headers and markup', () => {
  it.each(PAGES)('%s is HTML with CSP, no framing, no sniffing, no referrer, no caching', async (path) => {
    const res = await new PageClient(server.url).get(path);
    expect(res.status).toBeLessThan(500);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const csp = res.headers.get('content-security-policy')!;
    for (const d of [
      "default-src 'self'",
      "frame-ancestors 'none'",
      "base-uri 'none'",
      "form-action 'self'",
      "object-src 'none'",
    ]) {
      expect(csp).toContain(d);
    }
    expect(csp).not.toContain('unsafe-inline');
    expect(res.headers.get('x-frame-options')).toBe('DENY');
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.text).toMatch(/^<!doctype html>/);
    expect(res.text).not.toMatch(/<script|<link |src="http/);
    // Every form posts to our own origin and carries the CSRF field.
    for (const form of res.text.matchAll(/<form [^>]*>/g)) {
      expect(form[0]).toMatch(/method="post" action="\//);
    }
    expect(res.text.match(/<form /g)?.length ?? 0).toBe(res.text.match(/name="csrf_token"/g)?.length ?? 0);
  });

  it('the sign-in form has the contract field names and labels', async () => {
    const res = await new PageClient(server.url).get('/account/login');
    expect(res.text).toMatch(/<label for="f-email">/);
    expect(res.text).toMatch(/<input id="f-email" name="email" type="email"/);
    expect(res.text).toMatch(/<input id="f-password" name="password" type="password"/);
    expect(res.text).toMatch(/name="csrf_token" value="[A-Za-z0-9_-]{43}"/);
  });

  it('sets the CSRF cookie as __Host- (Secure, HttpOnly, SameSite=Lax, Path=/, no Domain) and reuses it', async () => {
    const browser = new PageClient(server.url);
    const first = await browser.get('/account/login');
    const cookie = first.headers.getSetCookie().find((c) => c.startsWith('__Host-svc_csrf='))!;
    expect(cookie).toMatch(/; Secure/);
    expect(cookie).toMatch(/; HttpOnly/);
    expect(cookie).toMatch(/; SameSite=Lax/);
    expect(cookie).toMatch(/; Path=\//);
    expect(cookie).not.toMatch(/Domain=/i);
    const second = await browser.get('/account/register');
    expect(second.headers.getSetCookie().some((c) => c.startsWith('__Host-svc_csrf='))).toBe(false);
    expect(csrfOf(second.text)).toBe(csrfOf(first.text));
  });

  it('refuses form posts without the CSRF field (403, inline message, no stack)', async () => {
    const browser = new PageClient(server.url);
    await browser.get('/account/login');
    for (const [path, form] of [
      ['/account/login', { email: 'a@example.test', password: 'x' }],
      ['/account/register', { name: 'A', email: 'a@example.test', password: 'correct-Horse-9' }],
      ['/account/reset', { email: 'a@example.test' }],
      ['/account/reset/confirm', { token: 'abc', password: 'correct-Horse-9' }],
    ] as const) {
      const res = await browser.post(path, form);
      expect(res.status, path).toBe(403);
      expect(res.headers.get('content-type')).toContain('text/html');
      expect(res.text).toMatch(/class="alert error"/);
    }
  });

  it('accepts the right token with Origin: null (what a no-referrer page posts) and with Sec-Fetch-Site same-origin', async () => {
    const browser = new PageClient(server.url);
    const token = csrfOf((await browser.get('/account/reset')).text);
    const a = await browser.post(
      '/account/reset',
      { csrf_token: token, email: 'a@example.test' },
      { origin: 'null' },
    );
    expect(a.status).toBe(303);
    const b = await browser.post(
      '/account/reset',
      { csrf_token: token, email: 'a@example.test' },
      { origin: 'null', 'sec-fetch-site': 'same-origin' },
    );
    expect(b.status).toBe(303);
    const c = await browser.post(
      '/account/reset',
      { csrf_token: token, email: 'a@example.test' },
      { origin: 'null', 'sec-fetch-site': 'same-site' },
    );
    expect(c.status).toBe(403);
  });

  it('escapes what a visitor typed when it comes back in the page', async () => {
    const evil = '"><script>alert(1)</script>';
    const browser = new PageClient(server.url);
    const page = await browser.get('/account/login');
    const res = await browser.post('/account/login', {
      csrf_token: csrfOf(page.text),
      email: evil,
      password: 'x',
    });
    expect(res.text).not.toContain('<script>');
    expect(res.text).toContain('value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"');
    const user = await createUser(server);
    const device = await signedIn(user).get(`/account/device?user_code=${encodeURIComponent(evil)}`);
    expect(device.status).toBe(400);
    expect(device.text).not.toContain('<script>');
  });

  it('refuses a CSRF field when the browser has no CSRF cookie', async () => {
    const browser = new PageClient(server.url);
    const token = csrfOf((await browser.get('/account/login')).text);
    browser.jar.delete('__Host-svc_csrf');
    const res = await browser.post('/account/reset', { csrf_token: token, email: 'a@example.test' });
    expect(res.status).toBe(403);
  });
});

describe('unknown pages', () => {
  it('an unknown /account page is an HTML 404 with the headers', async () => {
    const res = await new PageClient(server.url).get('/account/nope');
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toContain('text/html');
    expect(res.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
  });
});

describe('signed-out visitors', () => {
  it.each(['/account', '/account/device', '/account/clients/client_abc'])(
    '%s → 303 to sign-in',
    async (path) => {
      const res = await new PageClient(server.url).get(path);
      expect(res.status).toBe(303);
      const to = new URL(res.location!);
      expect(to.origin).toBe(server.url);
      expect(to.pathname).toBe('/account/login');
      expect(to.searchParams.get('return_to')).toBe(path === '/account' ? null : path);
    },
  );

  it('a stale or revoked session counts as signed out', async () => {
    const browser = new PageClient(server.url);
    browser.jar.set('__Host-svc_session', 'not-a-jwt');
    expect((await browser.get('/account')).status).toBe(303);
  });

  it.each(['https://evil.example/', '//evil.example', '/\\evil.example', 'javascript:alert(1)'])(
    'never carries return_to=%s into the form',
    async (target) => {
      const res = await new PageClient(server.url).get(
        `/account/login?return_to=${encodeURIComponent(target)}`,
      );
      expect(res.status).toBe(200);
      expect(hiddenOf(res.text, 'return_to')).toBeNull();
      expect(res.text).not.toContain('evil.example');
    },
  );

  it('a signed-in visitor of the sign-in page goes straight to a safe return_to, never off-site', async () => {
    const user = await createUser(server);
    const browser = signedIn(user);
    expect((await browser.get('/account/login?return_to=%2Faccount%2Fdevice')).location).toBe(
      `${server.url}/account/device`,
    );
    expect((await browser.get('/account/login?return_to=https%3A%2F%2Fevil.example')).location).toBe(
      `${server.url}/account`,
    );
    expect((await browser.get('/account/login?return_to=%2F%2Fevil.example')).location).toBe(
      `${server.url}/account`,
    );
  });
});

describe('dashboard', () => {
  it('shows the user, the verified state, 2FA, organizations with role and balance, and a sign-out form', async () => {
    const user = await createUser(server, { name: 'Dash <Board>' });
    const team = await createUser(server, { name: 'Team' });
    await addMember(server, team.orgKey, user.userId, 'viewer');
    const res = await signedIn(user).get('/account');
    expect(res.status).toBe(200);
    expect(res.text).toContain('Dash &lt;Board&gt;');
    expect(res.text).not.toContain('Dash <Board>');
    expect(res.text).toContain(user.email);
    expect(res.text).toContain('verified');
    expect(res.text).toContain('Two-factor authentication');
    expect(res.text).toContain(clientIdOf(user.orgKey));
    expect(res.text).toContain(clientIdOf(team.orgKey));
    expect(res.text).toMatch(/<td>viewer<\/td><td><span class="muted">—<\/span>/);
    expect(res.text).toMatch(/action="\/account\/logout"/);
    expect(res.text).toMatch(/action="\/account\/clients"/);
  });

  it('an unverified account sees the dashboard with the resend form', async () => {
    const user = await createUser(server, { verified: false });
    const res = await signedIn(user).get('/account?notice=verify');
    expect(res.status).toBe(200);
    expect(res.text).toContain('not verified');
    expect(res.text).toMatch(/action="\/account\/verify\/resend"/);
    expect(res.text).toContain('Verify your e-mail address');
  });

  it('creates an organization from the form and lists its members to a member', async () => {
    const owner = await createUser(server, { name: 'Owner O' });
    const browser = signedIn(owner);
    const dash = await browser.get('/account');
    const empty = await browser.post('/account/clients', { csrf_token: csrfOf(dash.text), name: '   ' });
    expect(empty.status).toBe(400);
    expect(empty.text).toMatch(/id="f-name-error"/);
    const noCsrf = await browser.post('/account/clients', { name: 'Nope' });
    expect(noCsrf.status).toBe(403);
    const made = await browser.post('/account/clients', { csrf_token: csrfOf(dash.text), name: 'Lab <One>' });
    expect(made.status).toBe(303);
    const after = await browser.follow(made);
    expect(after.text).toContain('Organization created');
    expect(after.text).toContain('Lab &lt;One&gt;');
    expect(after.text).not.toContain('Nope');
    const clientId = /href="\/account\/clients\/(client_[a-z0-9]+)">Lab &lt;One&gt;/.exec(after.text)![1]!;

    const member = await createUser(server, { name: 'Member M' });
    const { parseOrgId } = await import('../../src/ids.js');
    await addMember(server, parseOrgId(clientId)!, member.userId, 'member');
    const page = await signedIn(member).get(`/account/clients/${clientId}`);
    expect(page.status).toBe(200);
    // One row per member: the name with the e-mail under it, then the role (text for a member's view).
    expect(page.text).toMatch(
      /<td data-label="Member">Owner O<div class="sub">[^<]+<\/div><\/td><td data-label="Role">owner<\/td>/,
    );
    expect(page.text).toMatch(
      /<td data-label="Member">Member M<div class="sub">[^<]+<\/div><\/td><td data-label="Role">member<\/td>/,
    );
  });

  it('an owner adds a member by e-mail and removes them (their API token is revoked); a member gets no owner forms', async () => {
    const owner = await createUser(server, { name: 'Owner P' });
    const mate = await createUser(server, { name: 'Mate' });
    const browser = signedIn(owner);
    const page = await browser.get(`/account/clients/${owner.clientId}`);
    expect(page.text).toMatch(/action="\/account\/clients\/client_[a-z0-9]+\/members"/);
    const csrf = csrfOf(page.text);

    const unknown = await browser.post(`/account/clients/${owner.clientId}/members`, {
      csrf_token: csrf,
      email: 'nobody-here@example.test',
    });
    expect(unknown.status).toBe(404);
    expect(unknown.text).toMatch(/id="f-email-error"/);
    const added = await browser.post(`/account/clients/${owner.clientId}/members`, {
      csrf_token: csrf,
      email: ` ${mate.email.toUpperCase()} `,
      role: 'member',
    });
    expect(added.status).toBe(303);
    // The owner's view of the row: the role as a select (member chosen) in a form of its own.
    expect((await browser.follow(added)).text).toMatch(
      /<td data-label="Member">Mate<div class="sub">[^<]+<\/div><\/td><td data-label="Role"><form method="post" action="[^"]+\/role" class="inline"><input type="hidden" name="csrf_token"[^>]*>[\s\S]*?<option value="member" selected>/,
    );
    const again = await browser.post(`/account/clients/${owner.clientId}/members`, {
      csrf_token: csrf,
      email: mate.email,
    });
    expect(again.status).toBe(409);

    // The member sees the list but no owner forms, and cannot post them.
    const asMate = signedIn(mate);
    const matePage = await asMate.get(`/account/clients/${owner.clientId}`);
    expect(matePage.status).toBe(200);
    expect(matePage.text).not.toMatch(/\/members"/);
    expect(matePage.text).not.toContain('/remove"');
    const sneaky = await asMate.post(`/account/clients/${owner.clientId}/members`, {
      csrf_token: csrfOf((await asMate.get('/account')).text),
      email: owner.email,
    });
    expect(sneaky.status).toBe(403);

    const { createApiToken } = await import('../helpers/fixtures.js');
    const token = await createApiToken(server, mate, owner.orgKey);
    const { client: api } = await import('../helpers/http.js');
    expect((await api(server.url).get('/v1/auth/verify', { token: token.secret })).status).toBe(200);
    const removed = await browser.post(`/account/clients/${owner.clientId}/members/${mate.userId}/remove`, {
      csrf_token: csrf,
    });
    expect(removed.status).toBe(303);
    expect((await browser.follow(removed)).text).not.toContain('>Mate<div');
    expect((await api(server.url).get('/v1/auth/verify', { token: token.secret })).status).toBe(401);
    // The owner cannot be removed; the page says why.
    const self = await browser.post(`/account/clients/${owner.clientId}/members/${owner.userId}/remove`, {
      csrf_token: csrf,
    });
    expect(self.status).toBe(400);
    expect(self.text).toMatch(/class="alert error"/);
    // Removed: the page is gone for them.
    expect((await asMate.get(`/account/clients/${owner.clientId}`)).status).toBe(404);
  });

  it('2FA forms refuse a post without the CSRF field', async () => {
    const user = await createUser(server);
    const browser = signedIn(user);
    await browser.get('/account');
    for (const path of [
      '/account/2fa/setup',
      '/account/2fa/enable',
      '/account/2fa/disable',
      '/account/verify/resend',
      '/account/logout',
    ]) {
      const res = await browser.post(path, { code: '123456' });
      expect(res.status, path).toBe(403);
    }
    // Still signed in, and 2FA not touched.
    expect((await browser.get('/account')).text).toContain('Set up two-factor');
  });

  it('the members page of an organization answers 404 for one the user is not in', async () => {
    const user = await createUser(server);
    const stranger = await createUser(server);
    const res = await signedIn(user).get(`/account/clients/${clientIdOf(stranger.orgKey)}`);
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toContain('text/html');
  });

  it('sign-out revokes the session and clears the cookie', async () => {
    const user = await createUser(server);
    const browser = signedIn(user);
    const res = await browser.submit('/account', '/account/logout', {});
    expect(res.status).toBe(303);
    expect(res.location).toBe(`${server.url}/account/login?signed_out=1`);
    expect(browser.jar.has('__Host-svc_session')).toBe(false);
    // The old token no longer works even if replayed.
    expect((await signedIn(user).get('/account')).status).toBe(303);
  });
});
