import { describe, expect, it } from 'vitest';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { client } from '../helpers/http.js';
import {
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  browserSuite,
  signedIn,
} from '../helpers/browser.js';

// The account page in a real browser: change the name; change the password with the
// current one (a wrong one is shown on its field, which gets the focus), after which another browser's
// session is signed out and this one stays; sign out one session; disconnect an app, whose tokens then
// stop working. axe-core and the 390 px check.

const suite = browserSuite();

const settings = () => `${suite.server.v2Url}/account/settings`;
const models = (token: string) => client(suite.server.v2Url).get('/v1/models', { token });

describe.skipIf(!haveChromium)('the account page', () => {
  it('changes the name and the password; the other browser is signed out, an app disconnected', async () => {
    const user: TestUser = await createUser(suite.server, { name: 'Ada' });
    const grants = await issueTestGrants(suite.server, user, { orgKey: user.orgKey, resources: ['model'] });
    expect((await models(grants.model!)).status).toBe(200);
    const other = await signedIn(suite.browser, suite.server.v2Url, user);
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, user);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Account' }).click();
    await page.waitForURL((u) => u.pathname === '/account/settings');
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);

    await page.getByRole('textbox', { name: 'Name' }).fill('Ada Lovelace');
    await page.getByRole('button', { name: 'Save name' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'name');
    expect(await page.locator('header').textContent()).toContain('Ada Lovelace');

    await page.getByLabel('Current password').fill('not-my-password-1');
    await page.getByLabel(/New password/).fill('a-Brand-new-pass-7');
    await page.getByRole('button', { name: 'Change password' }).click();
    await page.waitForLoadState();
    expect(await page.locator('#f-current_password-error').textContent()).toContain(
      'not your current password',
    );
    expect(await page.evaluate('document.activeElement && document.activeElement.id')).toBe(
      'f-current_password',
    );
    await expectAccessible(page);

    await page.getByLabel('Current password').fill(user.password);
    await page.getByLabel(/New password/).fill('a-Brand-new-pass-7');
    await page.getByRole('button', { name: 'Change password' }).click();
    await page.waitForLoadState();
    expect(await page.getByRole('status').textContent()).toContain('Password changed');
    // The app connected before the change is disconnected (CONTRACT §7); this browser stays signed in.
    expect((await models(grants.model!)).status).toBe(401);
    await page.goto(settings());
    expect(new URL(page.url()).pathname).toBe('/account/settings');
    const res = await other.page.goto(`${suite.server.v2Url}/account`);
    expect(new URL(other.page.url()).pathname).toBe('/account/login');
    expect(res!.ok()).toBe(true);
    await other.context.close();

    // The new password signs in.
    const again = await signedIn(suite.browser, suite.server.v2Url, {
      email: user.email,
      password: 'a-Brand-new-pass-7',
    });
    await again.context.close();
    await context.close();
  });

  it('signs out one other session, and every other one; disconnects an app by its button', async () => {
    const user = await createUser(suite.server, { name: 'Bo' });
    const a = await signedIn(suite.browser, suite.server.v2Url, user);
    const b = await signedIn(suite.browser, suite.server.v2Url, user);
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, user, 390);
    await page.goto(settings());
    const rows = page.locator('section[aria-labelledby=h-sessions] tbody tr');
    expect(await rows.count()).toBe(4); // three browsers and the fixture's own session
    expect(await page.getByText('this browser').count()).toBe(1);
    await page
      .getByRole('button', { name: /^Sign out the session of/ })
      .first()
      .click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'session');
    expect(await rows.count()).toBe(3);
    await page.getByRole('button', { name: 'Sign out every other session' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'others');
    expect(await rows.count()).toBe(1);
    for (const other of [a, b]) {
      await other.page.goto(`${suite.server.v2Url}/account`);
      expect(new URL(other.page.url()).pathname).toBe('/account/login');
    }

    const grants = await issueTestGrants(suite.server, user, {
      orgKey: user.orgKey,
      resources: ['model', 'platform'],
    });
    await page.goto(settings());
    expect(await page.locator('section[aria-labelledby=h-apps] tbody tr').count()).toBe(2);
    expect(await page.locator('section[aria-labelledby=h-apps]').textContent()).toContain('svc terminal');
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    await page.getByRole('button', { name: 'Disconnect svc terminal (Model API)' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'app');
    expect((await models(grants.model!)).status).toBe(401);
    // The other grant of the same approval is its own (CONTRACT §7) and still listed.
    expect(await page.locator('section[aria-labelledby=h-apps] tbody tr').count()).toBe(1);
    await context.close();
    await a.context.close();
    await b.context.close();
  });

  it("another person's session or app handle changes nothing", async () => {
    const victim = await createUser(suite.server);
    const grants = await issueTestGrants(suite.server, victim, {
      orgKey: victim.orgKey,
      resources: ['model'],
    });
    const attacker = await createUser(suite.server);
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, attacker);
    await page.goto(settings());
    const csrf = await page.locator('input[name=csrf_token]').first().getAttribute('value');
    const res = await context.request.post(
      `${suite.server.v2Url}/account/settings/apps/${grants.grantIds.model}/revoke`,
      {
        form: { csrf_token: csrf! },
        headers: { origin: suite.server.v2Url },
      },
    );
    expect(res.status()).toBe(200); // followed to the page
    expect((await models(grants.model!)).status).toBe(200);
    await context.close();
  });
});
