import { describe, expect, it } from 'vitest';
import { addMember, createApiToken, createUser } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import {
  browserSuite,
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  signedIn,
} from '../helpers/browser.js';

// Deleting the account from /account/settings in a real browser: the card says what
// goes with the account before asking anything; a wrong password is shown on its field, which gets the
// focus; the right one deletes the account, signs the browser out and kills its API token. An owner
// whose organization has other members is told why not, with a link, and gets no form. axe-core and
// the 390 px check on each state.

const suite = browserSuite();
const settings = () => `${suite.server.v2Url}/account/settings`;
const card = '#h-delete';

describe.skipIf(!haveChromium)('deleting the account', () => {
  it('states what goes, checks the password on its field, then deletes and signs out', async () => {
    const user = await createUser(suite.server, { name: 'Leaving' });
    const { secret } = await createApiToken(suite.server, user, user.orgKey, 'laptop');
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, user);
    await page.goto(settings());
    const section = page.locator(`section:has(${card})`);
    expect(await section.textContent()).toContain('forfeits your unspent tokens: 50,000 tokens · $50.00');
    expect(await section.textContent()).toContain('(personal)');
    expect(await section.textContent()).toContain('the free trial is once per address');
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);

    await page.getByLabel('Your password').fill('not-my-Password-1');
    await page.getByRole('button', { name: 'Delete my account' }).click();
    await page.waitForLoadState();
    expect(await page.locator('#f-confirm_password-error').textContent()).toContain('not your password');
    expect(await page.evaluate('document.activeElement && document.activeElement.id')).toBe(
      'f-confirm_password',
    );
    await expectAccessible(page);

    await page.getByLabel('Your password').fill(user.password);
    await page.getByRole('button', { name: 'Delete my account' }).click();
    await page.waitForLoadState();
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toBe('Account deleted');
    expect(await page.getByRole('status').textContent()).toContain(
      'your unspent tokens (50,000 tokens · $50.00) were forfeited',
    );
    expect(await page.locator('.card').textContent()).toContain('starts without the free trial');
    expect(await page.locator('nav.site').count()).toBe(0);
    await expectAccessible(page);
    expect((await context.cookies()).map((c) => c.name)).not.toContain('__Host-svc_session');
    await page.goto(`${suite.server.v2Url}/account`);
    expect(new URL(page.url()).pathname).toBe('/account/login');
    expect((await client(suite.server.url).get('/v1/clients', { token: secret })).status).toBe(401);
    await context.close();
  });

  it('an owner whose organization has other members is told why not, and gets no form', async () => {
    const owner = await createUser(suite.server, { name: 'Team Owner' });
    const teammate = await createUser(suite.server);
    await addMember(suite.server, owner.orgKey, teammate.userId, 'member');
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner, 390);
    await page.goto(settings());
    const section = page.locator(`section:has(${card})`);
    expect(await section.textContent()).toContain('cannot be deleted yet');
    expect(await section.textContent()).toContain('1 other member(s)');
    expect(await section.getByRole('link', { name: 'Members' }).getAttribute('href')).toBe(
      `/account/clients/${owner.clientId}`,
    );
    expect(await section.getByRole('button').count()).toBe(0);
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    await context.close();
  });
});
