import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate } from 'otplib';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createUser, STRONG_PASSWORD } from '../helpers/fixtures.js';
import { PageClient, csrfOf, hiddenOf } from '../helpers/page-client.js';
import { randomToken } from '../../src/ids.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import type { DevMail, Page } from '../helpers/answers.js';

// The people's flows through the pages, over real HTTP, against the real services: register → verify
// link from /dev/mail → sign in → dashboard; sign-in with 2FA (otplib codes, recovery codes); password
// reset; signed-out → sign-in → back to return_to. The device approval flow is in portal-device.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const newEmail = () => `page-${randomToken(6)}@example.test`;

async function mailLink(to: string, path: string): Promise<string> {
  const res = await client(server.url).get<Page<DevMail>>('/dev/mail', { query: { to } });
  const text = res.body.data[0]?.text ?? '';
  const m = new RegExp(`https?://[^\\s"<>]+${path.replace('/', '\\/')}\\?token=[^\\s"<>]+`).exec(text);
  if (!m) throw new Error(`no ${path} link in the mail to ${to}`);
  return m[0];
}

async function signIn(browser: PageClient, email: string, password: string, returnTo?: string) {
  const page = await browser.get(
    returnTo ? `/account/login?return_to=${encodeURIComponent(returnTo)}` : '/account/login',
  );
  const res = await browser.post('/account/login', {
    csrf_token: csrfOf(page.text),
    email,
    password,
    ...(returnTo ? { return_to: hiddenOf(page.text, 'return_to') ?? '' } : {}),
  });
  return Object.assign(res, { preToken: csrfOf(page.text) });
}

describe('register → verify → sign in → dashboard', () => {
  it('works end to end through the pages, with the session cookie set like the API', async () => {
    const browser = new PageClient(server.v2Url);
    const email = newEmail();
    const reg = await browser.submit('/account/register', '/account/register', {
      name: 'Page Person',
      email: `  ${email.toUpperCase()} `,
      password: STRONG_PASSWORD,
    });
    expect(reg.status).toBe(303);
    expect(reg.location).toBe(`${server.v2Url}/account/login?registered=1`);
    expect((await browser.follow(reg)).text).toContain('Account created');

    const link = new URL(await mailLink(email, '/account/verify'));
    expect(link.origin).toBe(server.v2Url);
    const verified = await browser.get(link.pathname + link.search);
    expect(verified.status).toBe(200);
    expect(verified.text).toContain('is verified');
    // Single use: the same link again says so.
    const again = await browser.get(link.pathname + link.search);
    expect(again.status).toBe(400);
    expect(again.text).toContain('not valid any more');

    const login = await signIn(browser, email, STRONG_PASSWORD);
    const preLoginToken = login.preToken;
    expect(login.status).toBe(303);
    expect(login.location).toBe(`${server.v2Url}/account`);
    const cookie = login.headers.getSetCookie().find((c) => c.startsWith('__Host-svc_session='))!;
    expect(cookie).toMatch(/; Path=\//);
    expect(cookie).toMatch(/; HttpOnly/);
    expect(cookie).toMatch(/; Secure/);
    expect(cookie).toMatch(/; SameSite=Lax/);
    expect(cookie).not.toMatch(/Domain=/i);
    // Byte for byte the API's cookie attributes (only the token and the expiry differ).
    const api = await client(server.url).post('/v1/login', { email, password: STRONG_PASSWORD });
    const apiCookie = api.headers.getSetCookie().find((c) => c.startsWith('__Host-svc_session='))!;
    const attrs = (c: string) =>
      c
        .split(';')
        .slice(1)
        .map((a) => a.trim())
        .filter((a) => !/^expires=/i.test(a))
        .sort();
    expect(attrs(cookie)).toEqual(attrs(apiCookie));
    // The page session is the API session.
    const token = browser.jar.get('__Host-svc_session')!;
    expect((await client(server.url).get('/v1/clients', { token })).status).toBe(200);

    // The CSRF token is rotated at sign-in: the one from before no longer fits.
    const dash = await browser.follow(login);
    expect(dash.status).toBe(200);
    // Signed in and verified, the used verification link says so kindly.
    const reopened = await browser.get(link.pathname + link.search);
    expect(reopened.status).toBe(200);
    expect(reopened.text).toContain('already verified');
    expect(csrfOf(dash.text)).not.toBe(preLoginToken);
    expect(
      (await browser.post('/account/clients', { csrf_token: preLoginToken, name: 'Stale' })).status,
    ).toBe(403);
    expect(dash.text).toContain(email);
    expect(dash.text).toContain('Page Person');
    expect(dash.text).toMatch(/class="badge ok">verified/);
  });

  it('shows registration errors inline: weak password, taken e-mail, bad e-mail', async () => {
    const browser = new PageClient(server.url);
    const weak = await browser.submit('/account/register', '/account/register', {
      name: 'A',
      email: newEmail(),
      password: 'short',
    });
    expect(weak.status).toBe(400);
    expect(weak.text).toMatch(/id="f-password-error"/);
    const taken = await createUser(server);
    const dup = await browser.submit('/account/register', '/account/register', {
      name: 'A',
      email: taken.email,
      password: STRONG_PASSWORD,
    });
    expect(dup.status).toBe(409);
    expect(dup.text).toMatch(/id="f-email-error">An account with this e-mail already exists/);
    const bad = await browser.submit('/account/register', '/account/register', {
      name: 'A',
      email: 'not-an-email',
      password: STRONG_PASSWORD,
    });
    expect(bad.status).toBe(400);
    expect(bad.text).toMatch(/id="f-email-error"/);
    // The form keeps what was typed (except the password).
    expect(bad.text).toContain('value="not-an-email"');
    expect(bad.text).not.toContain(STRONG_PASSWORD);
  });

  it('an unverified account can sign in, sees the resend form, and a new link arrives', async () => {
    const browser = new PageClient(server.url);
    const email = newEmail();
    await browser.submit('/account/register', '/account/register', {
      name: 'U',
      email,
      password: STRONG_PASSWORD,
    });
    const dash = await browser.follow(await signIn(browser, email, STRONG_PASSWORD));
    expect(dash.text).toContain('not verified');
    const before = (await client(server.url).get<Page<DevMail>>('/dev/mail', { query: { to: email } })).body
      .data.length;
    const res = await browser.post('/account/verify/resend', { csrf_token: csrfOf(dash.text) });
    expect(res.status).toBe(303);
    expect((await browser.follow(res)).text).toContain('new verification link');
    expect(
      (await client(server.url).get<Page<DevMail>>('/dev/mail', { query: { to: email } })).body.data.length,
    ).toBe(before + 1);
  });
});

describe('sign-in', () => {
  it('gives the same inline answer for a wrong password and an unknown e-mail', async () => {
    const user = await createUser(server);
    const a = await signIn(new PageClient(server.url), user.email, 'wrong-Password-1');
    const b = await signIn(new PageClient(server.url), newEmail(), 'wrong-Password-1');
    expect(a.status).toBe(401);
    expect(b.status).toBe(401);
    const msg = (t: string) => /class="alert error" role="alert">([^<]+)</.exec(t)?.[1];
    expect(msg(a.text)).toBe(msg(b.text));
    expect(a.headers.getSetCookie().some((c) => c.startsWith('__Host-svc_session='))).toBe(false);
  });

  it('returns to return_to after signing in, and never off-site', async () => {
    const user = await createUser(server);
    const browser = new PageClient(server.url);
    const first = await browser.get('/account/device?user_code=BCDF-GHJK');
    const loginUrl = new URL(first.location!);
    expect(loginUrl.searchParams.get('return_to')).toBe('/account/device?user_code=BCDF-GHJK');
    const res = await signIn(browser, user.email, user.password, loginUrl.searchParams.get('return_to')!);
    expect(res.location).toBe(`${server.url}/account/device?user_code=BCDF-GHJK`);

    for (const evil of ['https://evil.example/x', '//evil.example/x', '/\\evil.example']) {
      const b = new PageClient(server.url);
      const page = await b.get('/account/login');
      const out = await b.post('/account/login', {
        csrf_token: csrfOf(page.text),
        email: user.email,
        password: user.password,
        return_to: evil,
      });
      expect(out.status).toBe(303);
      expect(out.location).toBe(`${server.url}/account`);
    }
  });
});

describe('two-factor authentication through the pages', () => {
  it('set up (QR + secret), enable with a code, recovery codes once, sign in with TOTP and with a recovery code, disable', async () => {
    const user = await createUser(server);
    const browser = new PageClient(server.url);
    const dash = await browser.follow(await signIn(browser, user.email, user.password));
    const setup = await browser.post('/account/2fa/setup', { csrf_token: csrfOf(dash.text) });
    expect(setup.status).toBe(200);
    expect(setup.text).toMatch(/<svg[^>]*viewBox/);
    const secret = /<code class="mono">([A-Z2-7]+)<\/code>/.exec(setup.text)![1]!;

    const wrong = await browser.post('/account/2fa/enable', {
      csrf_token: csrfOf(setup.text),
      code: '000000',
    });
    expect(wrong.status).toBe(400);
    expect(wrong.text).toContain(secret); // the same secret again, not a new one
    expect(wrong.text).toMatch(/id="f-code-error"/);

    const enabled = await browser.post('/account/2fa/enable', {
      csrf_token: csrfOf(setup.text),
      code: await generate({ secret }),
    });
    expect(enabled.status).toBe(200);
    const codes = [...enabled.text.matchAll(/<li>([a-z2-7]{5}-[a-z2-7]{5})<\/li>/g)].map((m) => m[1]!);
    expect(codes).toHaveLength(10);
    // Shown once: the dashboard afterwards lists none.
    const later = await browser.get('/account');
    expect(later.text).not.toContain(codes[0]!);
    expect(later.text).toContain('10 recovery codes left');

    // Sign in again: password, then the 2FA form.
    const b2 = new PageClient(server.url);
    const step1 = await signIn(b2, user.email, user.password, '/account/device');
    expect(step1.status).toBe(200);
    expect(step1.text).toMatch(/name="code"/);
    expect(b2.jar.has('__Host-svc_session')).toBe(false);
    const challenge = hiddenOf(step1.text, 'challenge_token')!;
    const bad = await b2.post('/account/login/2fa', {
      csrf_token: csrfOf(step1.text),
      challenge_token: challenge,
      code: '123456',
      return_to: '/account/device',
    });
    expect(bad.status).toBe(401);
    // Said on the field, which has the focus.
    expect(bad.text).toMatch(/<input id="f-code"[^>]* autofocus[^>]* aria-invalid="true">/);
    expect(bad.text).toContain('<div class="field-error" id="f-code-error">The code is not valid.</div>');
    // The next time step (enable used the current one; a used step is refused).
    const next = await generate({ secret, epoch: Math.floor(Date.now() / 1000) + 30 });
    const ok = await b2.post('/account/login/2fa', {
      csrf_token: csrfOf(bad.text),
      challenge_token: challenge,
      code: next,
      return_to: '/account/device',
    });
    expect(ok.status).toBe(303);
    expect(ok.location).toBe(`${server.url}/account/device`);
    expect(b2.jar.has('__Host-svc_session')).toBe(true);
    // The same code again, on another sign-in: refused, and said to be used (not "not valid").
    const b5 = new PageClient(server.url);
    const s5 = await signIn(b5, user.email, user.password);
    const replayed = await b5.post('/account/login/2fa', {
      csrf_token: csrfOf(s5.text),
      challenge_token: hiddenOf(s5.text, 'challenge_token')!,
      code: next,
    });
    expect(replayed.status).toBe(401);
    expect(replayed.text).toContain('Code already used: wait for the next code');

    // A recovery code instead of the app.
    const b3 = new PageClient(server.url);
    const s1 = await signIn(b3, user.email, user.password);
    const viaRecovery = await b3.post('/account/login/2fa', {
      csrf_token: csrfOf(s1.text),
      challenge_token: hiddenOf(s1.text, 'challenge_token')!,
      code: codes[0]!.toUpperCase(),
    });
    expect(viaRecovery.status).toBe(303);
    expect(viaRecovery.location).toBe(`${server.url}/account`);
    // …once.
    const b4 = new PageClient(server.url);
    const s2 = await signIn(b4, user.email, user.password);
    const reused = await b4.post('/account/login/2fa', {
      csrf_token: csrfOf(s2.text),
      challenge_token: hiddenOf(s2.text, 'challenge_token')!,
      code: codes[0]!,
    });
    expect(reused.status).toBe(401);
    expect(reused.text).toContain('Code already used');

    // Disable with another recovery code.
    const d = await browser.get('/account');
    const off = await browser.post('/account/2fa/disable', { csrf_token: csrfOf(d.text), code: codes[1]! });
    expect(off.status).toBe(303);
    expect((await browser.follow(off)).text).toContain('Two-factor authentication is off');
    const plain = await signIn(new PageClient(server.url), user.email, user.password);
    expect(plain.status).toBe(303);
  });

  it('five wrong codes burn the challenge: then even a right code sends the person back to sign-in', async () => {
    const user = await createUser(server);
    const { setupTwoFactor, enableTwoFactor } = await import('../../src/accounts/service.js');
    const { secret } = await setupTwoFactor(server.deps, user.userId);
    await enableTwoFactor(server.deps, user.userId, await generate({ secret }), SYSTEM_ORIGIN);
    const browser = new PageClient(server.url);
    const step1 = await signIn(browser, user.email, user.password);
    const challenge = hiddenOf(step1.text, 'challenge_token')!;
    for (let i = 0; i < 5; i++) {
      const res = await browser.post('/account/login/2fa', {
        csrf_token: csrfOf(step1.text),
        challenge_token: challenge,
        code: '000000',
      });
      expect(res.status).toBe(401);
      expect(res.text).toMatch(/name="challenge_token"/);
    }
    const right = await generate({ secret, epoch: Math.floor(Date.now() / 1000) + 30 });
    const burnt = await browser.post('/account/login/2fa', {
      csrf_token: csrfOf(step1.text),
      challenge_token: challenge,
      code: right,
    });
    expect(burnt.status).toBe(401);
    expect(burnt.text).toContain('sign in again');
    expect(burnt.text).not.toMatch(/name="challenge_token"/);
    expect(browser.jar.has('__Host-svc_session')).toBe(false);
  });

  it('a burnt challenge sends the person back to the sign-in form', async () => {
    const browser = new PageClient(server.url);
    const page = await browser.get('/account/login');
    const res = await browser.post('/account/login/2fa', {
      csrf_token: csrfOf(page.text),
      challenge_token: 'made-up',
      code: '123456',
    });
    expect(res.status).toBe(401);
    expect(res.text).toContain('sign in again');
    expect(res.text).toMatch(/name="password"/);
  });
});

describe('password reset', () => {
  it('request → mail link → confirm → old sessions revoked → sign in with the new password', async () => {
    const user = await createUser(server);
    const old = new PageClient(server.url);
    old.jar.set('__Host-svc_session', user.session);
    expect((await old.get('/account')).status).toBe(200);

    const browser = new PageClient(server.url);
    const req = await browser.submit('/account/reset', '/account/reset', { email: user.email });
    expect(req.status).toBe(303);
    expect(req.location).toBe(`${server.url}/account/reset?sent=1`);
    // The same answer for an address without an account.
    const unknown = await browser.submit('/account/reset', '/account/reset', { email: newEmail() });
    expect(unknown.location).toBe(req.location);

    const link = new URL(await mailLink(user.email, '/account/reset'));
    const form = await browser.get(link.pathname + link.search);
    expect(form.status).toBe(200);
    expect(form.text).toMatch(/name="password" type="password"/);
    const token = hiddenOf(form.text, 'token')!;
    const weak = await browser.post('/account/reset/confirm', {
      csrf_token: csrfOf(form.text),
      token,
      password: 'weak',
    });
    expect(weak.status).toBe(400);
    expect(weak.text).toMatch(/id="f-password-error"/);
    const newPassword = 'another-Horse-7';
    const done = await browser.post('/account/reset/confirm', {
      csrf_token: csrfOf(form.text),
      token,
      password: newPassword,
    });
    expect(done.status).toBe(303);
    expect(done.location).toBe(`${server.url}/account/login?reset=1&api_tokens=0`);
    // Single use.
    const replay = await browser.post('/account/reset/confirm', {
      csrf_token: csrfOf(form.text),
      token,
      password: newPassword,
    });
    expect(replay.status).toBe(400);
    expect(replay.text).toContain('not valid any more');
    // Opened again, the used link says so at once: no password form to type into first.
    const reopened = await browser.get(link.pathname + link.search);
    expect(reopened.status).toBe(400);
    expect(reopened.text).toContain('not valid any more');
    expect(reopened.text).not.toMatch(/name="password" type="password"/);

    expect((await old.get('/account')).status).toBe(303);
    expect((await signIn(new PageClient(server.url), user.email, user.password)).status).toBe(401);
    expect((await signIn(new PageClient(server.url), user.email, newPassword)).status).toBe(303);
  });
});

describe('rate limits on the pages (CONTRACT §1)', () => {
  it('wrong passwords per e-mail: the 11th attempt is 429 with Retry-After, shown inline', async () => {
    const user = await createUser(server);
    const browser = new PageClient(server.url);
    const page = await browser.get('/account/login');
    const post = () =>
      browser.post('/account/login', {
        csrf_token: csrfOf(page.text),
        email: user.email,
        password: 'wrong-Password-1',
      });
    for (let i = 0; i < 10; i++) expect((await post()).status).toBe(401);
    const limited = await post();
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(limited.text).toMatch(/class="alert error" role="alert">Too many attempts/);
    expect(limited.text).toMatch(/name="password"/);
  });

  it('reset requests per e-mail: the 6th in an hour is 429, shown inline', async () => {
    const browser = new PageClient(server.url);
    const email = newEmail();
    for (let i = 0; i < 5; i++)
      expect((await browser.submit('/account/reset', '/account/reset', { email })).status).toBe(303);
    const limited = await browser.submit('/account/reset', '/account/reset', { email });
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(limited.text).toContain('Too many attempts');
  });

  it('per address: RATE_LIMIT_IP_PER_MIN applies to the page routes and answers an HTML page', async () => {
    const limitedServer = await startTestServer({ env: { RATE_LIMIT_IP_PER_MIN: '3' } });
    try {
      const browser = new PageClient(limitedServer.url);
      const page = await browser.get('/account/login');
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) {
        statuses.push(
          (await browser.post('/account/reset', { csrf_token: csrfOf(page.text), email: newEmail() })).status,
        );
      }
      expect(statuses.slice(0, 3)).toEqual([303, 303, 303]);
      const res = await browser.post('/account/login', {
        csrf_token: csrfOf(page.text),
        email: 'a@example.test',
        password: 'x',
      });
      expect(res.status).toBe(429);
      expect(res.headers.get('content-type')).toContain('text/html');
      expect(res.headers.get('retry-after')).toMatch(/^\d+$/);
      expect(res.text).toContain('Slow down');
    } finally {
      await limitedServer.close();
    }
  });
});
