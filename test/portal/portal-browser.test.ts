import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { browserSuite, haveChromium } from '../helpers/browser.js';
import { client } from '../helpers/http.js';
import { addMember, createUser } from '../helpers/fixtures.js';
import { orgIdOf } from '../../src/ids.js';
import type { DeviceCode, DevicePoll } from '../helpers/answers.js';

// A real browser (headless Chromium driven by playwright-core) through the pages: a signed-out person
// opens the device link, is sent to sign-in, comes back, picks an organization and approves; the
// terminal's poll completes. It also proves what only a browser can: the __Host- cookies are kept on
// http://127.0.0.x (a loopback origin counts as secure), the CSP lets our stylesheet apply and blocks
// nothing we use. Screenshots go to /tmp for a look at the design.

const suite = browserSuite();

describe.skipIf(!haveChromium)('in a real browser', () => {
  it('signs in from the device link, comes back, chooses the organization and approves; the poll completes', async () => {
    const user = await createUser(suite.server, { name: 'Ada Browser' });
    const team = await createUser(suite.server, { name: 'Research Team' });
    await addMember(suite.server, team.orgKey, user.userId, 'member');
    const code = (await client(suite.server.url).post<DeviceCode>('/v1/auth/device/code')).body;

    const context = await suite.browser.newContext({ viewport: { width: 1100, height: 800 } });
    const page = await context.newPage();
    const cspViolations: string[] = [];
    page.on('console', (m) => {
      if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
    });

    await page.goto(code.verification_uri_complete);
    expect(new URL(page.url()).pathname).toBe('/account/login');
    expect(new URL(page.url()).searchParams.get('return_to')).toContain(code.user_code);
    // The stylesheet applied (allowed by its hash): the page background is the design's, not white.
    expect(await page.evaluate('getComputedStyle(document.documentElement).backgroundColor')).toBe(
      'rgb(245, 246, 248)',
    );
    await page.screenshot({ path: '/tmp/portal-login.png', fullPage: true });

    await page.getByLabel('E-mail').fill(user.email);
    await page.getByLabel('Password').fill(user.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((u) => u.pathname === '/account/device');
    const cookies = await context.cookies();
    expect(cookies.map((c) => c.name)).toEqual(
      expect.arrayContaining(['__Host-svc_session', '__Host-svc_csrf']),
    );
    expect(cookies.find((c) => c.name === '__Host-svc_session')).toMatchObject({
      secure: true,
      httpOnly: true,
      sameSite: 'Lax',
      path: '/',
    });

    await expect.poll(() => page.locator('.usercode').textContent()).toBe(code.user_code);
    await page.getByLabel('Organization').selectOption(orgIdOf(team.orgKey));
    await page.screenshot({ path: '/tmp/portal-device.png', fullPage: true });
    await page.getByRole('button', { name: 'Approve' }).click();
    await page.waitForURL((u) => u.searchParams.get('done') === 'approved');
    expect(await page.locator('h1').textContent()).toBe('Device connected');

    const polled = await client(suite.server.url).post<DevicePoll>('/v1/auth/device/poll', {
      device_code: code.device_code,
    });
    expect(polled.body).toMatchObject({
      status: 'complete',
      client_id: orgIdOf(team.orgKey),
      email: user.email,
    });

    await page.goto(`${suite.server.v2Url}/account`);
    await page.screenshot({ path: '/tmp/portal-dashboard.png', fullPage: true });
    await page.setViewportSize({ width: 380, height: 800 });
    await page.screenshot({ path: '/tmp/portal-dashboard-narrow.png', fullPage: true });
    // Nothing horizontal-scrolls on a phone-sized screen.
    expect(await page.evaluate('document.documentElement.scrollWidth <= window.innerWidth + 1')).toBe(true);

    // 2FA set-up: the QR code is inline SVG (no script, no external image), rendered under the CSP.
    await page.setViewportSize({ width: 1100, height: 800 });
    await page.getByRole('button', { name: 'Set up two-factor' }).click();
    await expect.poll(() => page.locator('.qr svg').count()).toBe(1);
    const box = await page.locator('.qr svg').boundingBox();
    expect(box!.width).toBeGreaterThan(100);
    await page.screenshot({ path: '/tmp/portal-2fa-setup.png', fullPage: true });

    // Sign out through the form.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL((u) => u.pathname === '/account/login');
    expect((await context.cookies()).some((c) => c.name === '__Host-svc_session')).toBe(false);
    expect(cspViolations).toEqual([]);
    await context.close();
  });

  it('has a dark palette for people who ask for one', async () => {
    const context = await suite.browser.newContext({
      colorScheme: 'dark',
      viewport: { width: 700, height: 600 },
    });
    const page = await context.newPage();
    await page.goto(`${suite.server.url}/account/register`);
    expect(await page.evaluate('getComputedStyle(document.documentElement).backgroundColor')).toBe(
      'rgb(17, 20, 24)',
    );
    // The header stays dark with light text in both palettes.
    expect(
      await page.evaluate("getComputedStyle(document.querySelector('header.top')).backgroundColor"),
    ).toBe('rgb(10, 13, 17)');
    await page.screenshot({ path: '/tmp/portal-register-dark.png', fullPage: true });
    await context.close();
  });

  it('cannot be framed by another site', async () => {
    // Another site on loopback (another origin), framing svc's sign-in page and a page of its own: its
    // own page shows, so what keeps svc's out is svc's frame-ancestors 'none' and X-Frame-Options.
    const other = createServer((req, res) => {
      res.setHeader('content-type', 'text/html');
      if (req.url === '/own') return res.end('<p>a page of its own</p>');
      res.end(`<iframe src="${suite.server.url}/account/login"></iframe><iframe src="/own"></iframe>`);
    });
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
    const context = await suite.browser.newContext();
    try {
      const page = await context.newPage();
      // The load event waits for both frames' own loads, blocked or not.
      await page.goto(`http://127.0.0.1:${(other.address() as AddressInfo).port}/`, { waitUntil: 'load' });
      const contentOf = async (path: string) => {
        const frame = page.frames().find((f) => f !== page.mainFrame() && f.url().endsWith(path));
        return frame ? await frame.content().catch(() => '') : '';
      };
      expect(await contentOf('/own')).toContain('a page of its own');
      // Blocked: the frame never gets the page's content.
      expect(await contentOf('/account/login')).not.toContain('name="password"');
    } finally {
      await context.close();
      await new Promise((resolve) => other.close(resolve));
    }
  });
});
