import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createUser, type TestUser } from '../helpers/fixtures.js';
import { PageClient, csrfOf, hiddenOf } from '../helpers/page-client.js';
import { registerAccount } from '../../src/accounts/service.js';
import { orgIdOf } from '../../src/ids.js';
import type { DeviceCode, DevicePoll } from '../helpers/answers.js';

// /account/device (CONTRACT §4, §6): enter or confirm the user code, choose the organization, approve or
// deny; the terminal's poll then completes (or is denied) through the real API.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

function signedIn(user: TestUser): PageClient {
  const browser = new PageClient(server.v2Url);
  browser.jar.set('__Host-svc_session', user.session);
  return browser;
}

async function newDeviceCode() {
  const res = await client(server.url).post<DeviceCode>('/v1/auth/device/code');
  expect(res.status).toBe(200);
  return res.body;
}

const poll = (deviceCode: string) =>
  client(server.url).post<DevicePoll>('/v1/auth/device/poll', { device_code: deviceCode });

describe('device approval page', () => {
  it('sends a signed-out visitor to sign-in with return_to, keeping the user code', async () => {
    const code = await newDeviceCode();
    const browser = new PageClient(server.v2Url);
    const path =
      new URL(code.verification_uri_complete).pathname + new URL(code.verification_uri_complete).search;
    const res = await browser.get(path);
    expect(res.status).toBe(303);
    const login = new URL(res.location!);
    expect(login.pathname).toBe('/account/login');
    expect(login.searchParams.get('return_to')).toBe(path);
    // The sign-in page carries the target on to its form.
    const page = await browser.get(login.pathname + login.search);
    expect(hiddenOf(page.text, 'return_to')).toBe(path);
  });

  it('prefills from verification_uri_complete, offers live memberships (default first) and approves for the chosen one', async () => {
    const user = await createUser(server);
    const other = await createUser(server, { name: 'Team Owner' });
    await addMember(server, other.orgKey, user.userId, 'member');
    const code = await newDeviceCode();
    const browser = signedIn(user);
    const url = new URL(code.verification_uri_complete);
    const page = await browser.get(url.pathname + url.search);
    expect(page.status).toBe(200);
    expect(page.text).toContain(code.user_code);
    const options = [...page.text.matchAll(/<option value="([^"]+)"/g)].map((m) => m[1]);
    expect(options).toEqual([orgIdOf(user.orgKey), orgIdOf(other.orgKey)]);
    expect(page.text).toMatch(/name="decision" value="approve"/);
    expect(page.text).toMatch(/name="decision" value="deny"/);

    const pending = await poll(code.device_code);
    expect(pending.body).toEqual({ status: 'authorization_pending' });

    const res = await browser.post('/account/device', {
      csrf_token: csrfOf(page.text),
      user_code: code.user_code.toLowerCase().replace('-', ''),
      client_id: orgIdOf(other.orgKey),
      decision: 'approve',
    });
    expect(res.status).toBe(303);
    const done = await browser.follow(res);
    expect(done.text).toContain('Device connected');

    const complete = await poll(code.device_code);
    expect(complete.status).toBe(200);
    expect(complete.body).toMatchObject({
      status: 'complete',
      client_id: orgIdOf(other.orgKey),
      email: user.email,
    });
    expect(complete.body.token).toMatch(/^svc_/);
    // Exactly once.
    expect((await poll(code.device_code)).body).toEqual({ status: 'expired_token' });
  });

  it('approves for the default organization when none is chosen', async () => {
    const user = await createUser(server);
    const code = await newDeviceCode();
    const browser = signedIn(user);
    const res = await browser.submit('/account/device', '/account/device', {
      user_code: code.user_code,
      decision: 'approve',
    });
    expect(res.status).toBe(303);
    expect((await poll(code.device_code)).body).toMatchObject({
      status: 'complete',
      client_id: orgIdOf(user.orgKey),
    });
  });

  it('denies: the device polls access_denied', async () => {
    const user = await createUser(server);
    const code = await newDeviceCode();
    const browser = signedIn(user);
    const res = await browser.submit(`/account/device?user_code=${code.user_code}`, '/account/device', {
      user_code: code.user_code,
      decision: 'deny',
    });
    expect(res.location).toMatch(/done=denied$/);
    expect((await browser.follow(res)).text).toContain('Request denied');
    const denied = await poll(code.device_code);
    expect(denied.status).toBe(400);
    expect(denied.body).toEqual({ status: 'access_denied' });
  });

  it('entry form: a typed code goes to the confirmation (303), a wrong code is an inline error', async () => {
    const user = await createUser(server);
    const code = await newDeviceCode();
    const browser = signedIn(user);
    const entry = await browser.get('/account/device');
    expect(entry.text).toMatch(/<input id="f-user_code" name="user_code"/);
    const next = await browser.post('/account/device', {
      csrf_token: csrfOf(entry.text),
      user_code: code.user_code,
    });
    expect(next.status).toBe(303);
    expect(next.location).toContain(`/account/device?user_code=${encodeURIComponent(code.user_code)}`);

    const wrong = await browser.get('/account/device?user_code=BBBB-BBBB');
    expect(wrong.status).toBe(400);
    expect(wrong.text).toContain('not valid or has expired');
    const wrongPost = await browser.post('/account/device', {
      csrf_token: csrfOf(entry.text),
      user_code: 'BBBB-BBBB',
      decision: 'approve',
    });
    expect(wrongPost.status).toBe(400);
    expect(wrongPost.text).toMatch(/class="alert error"/);
    expect(wrongPost.text).not.toMatch(/at .*\.ts:\d+/); // never a stack trace
  });

  it('refuses an organization the user does not belong to (403), and leaves the code pending', async () => {
    const user = await createUser(server);
    const stranger = await createUser(server);
    const code = await newDeviceCode();
    const browser = signedIn(user);
    const res = await browser.submit('/account/device', '/account/device', {
      user_code: code.user_code,
      client_id: orgIdOf(stranger.orgKey),
      decision: 'approve',
    });
    expect(res.status).toBe(403);
    expect(res.text).toMatch(/class="alert error"/);
    expect((await poll(code.device_code)).body.status).toBe('authorization_pending');
  });

  it('refuses a POST without the CSRF field, with a wrong one, or from another site', async () => {
    const user = await createUser(server);
    const code = await newDeviceCode();
    const browser = signedIn(user);
    const page = await browser.get('/account/device');
    const token = csrfOf(page.text);
    const fields = { user_code: code.user_code, decision: 'approve' };
    expect((await browser.post('/account/device', fields)).status).toBe(403);
    expect(
      (await browser.post('/account/device', { ...fields, csrf_token: token.slice(1) + 'A' })).status,
    ).toBe(403);
    expect(
      (
        await browser.post(
          '/account/device',
          { ...fields, csrf_token: token },
          { origin: 'https://evil.example' },
        )
      ).status,
    ).toBe(403);
    expect(
      (
        await browser.post(
          '/account/device',
          { ...fields, csrf_token: token },
          { 'sec-fetch-site': 'cross-site' },
        )
      ).status,
    ).toBe(403);
    // A token from another browser (its own cookie) does not fit this browser's cookie.
    const other = signedIn(user);
    const otherToken = csrfOf((await other.get('/account/device')).text);
    expect((await browser.post('/account/device', { ...fields, csrf_token: otherToken })).status).toBe(403);
    expect((await poll(code.device_code)).body.status).toBe('authorization_pending');
    // The right token, same origin: accepted.
    const ok = await browser.post(
      '/account/device',
      { ...fields, csrf_token: token },
      { origin: server.v2Url, 'sec-fetch-site': 'same-origin' },
    );
    expect(ok.status).toBe(303);
  });

  it('names the OAuth client and the resources of an OAuth device request', async () => {
    const { createDeviceAuthorization } = await import('../../src/device/store.js');
    const issued = await createDeviceAuthorization(server.deps, {
      flow: 'oauth',
      oauthClientId: 'svc-cli',
      resources: [`${server.v2Url}/v1`],
      scope: 'model',
    });
    const user = await createUser(server);
    const page = await signedIn(user).get(`/account/device?user_code=${issued.userCode}`);
    expect(page.status).toBe(200);
    expect(page.text).toContain('<strong>svc-cli</strong>');
    expect(page.text).toContain('Model access');
    expect(page.text).not.toContain('Platform tools');
  });

  it('sends an unverified account to the dashboard instead of approving', async () => {
    const { user } = await registerAccount(server.deps.db, {
      email: `unverified-${Date.now()}@example.test`,
      name: 'U',
      password: 'correct-Horse-9',
    });
    const { issueSession } = await import('../../src/auth/session.js');
    const { token } = await issueSession(server.deps.db, server.deps.keys.session, user.id);
    const browser = new PageClient(server.v2Url);
    browser.jar.set('__Host-svc_session', token);
    const res = await browser.get('/account/device');
    expect(res.status).toBe(303);
    expect(res.location).toMatch(/\/account\?notice=verify$/);
  });
});
