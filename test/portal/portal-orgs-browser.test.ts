import { beforeAll, describe, expect, it, vi } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import type { TestServer } from '../helpers/server.js';
import { addMember, createApiToken, createUser, STRONG_PASSWORD } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import type {
  ClientRow,
  CreatedClient,
  DevMail,
  MemberRow,
  OwnerBalance,
  Page as List,
} from '../helpers/answers.js';
import { browserSuite, expectAccessibleAtBothWidths, haveChromium, signedIn } from '../helpers/browser.js';
import { newEmail } from '../helpers/accounts-support.js';

// Organizations in a real browser: the owner changes a role, removes someone after a
// confirmation page, renames and deletes an organization (its balance back in the pool); a member
// leaves after confirming; a person with no account is invited by e-mail, registers, verifies and
// accepts. On every page: axe-core (no serious or critical violation), no sideways scroll at 390 px, and
// a CSRF field in every form that posts.

const suite = browserSuite();
vi.setConfig({ testTimeout: 180_000 });
let server: TestServer;
let browser: Browser;
let api: ReturnType<typeof client>;

beforeAll(() => {
  ({ server, browser } = suite);
  if (server) api = client(server.url);
});

/** Every form on the page that posts carries the hidden CSRF field (CONTRACT §4). */
async function expectCsrfOnEveryForm(page: Page) {
  const missing = await page.evaluate(
    `[...document.querySelectorAll('form')].filter((f) => f.method === 'post' && !f.querySelector('input[name=csrf_token]')).map((f) => f.action)`,
  );
  expect(missing, page.url()).toEqual([]);
}

/** The checks every page of this file gets, at its current width and at 390 px. */
async function checkPage(page: Page) {
  await expectCsrfOnEveryForm(page);
  await expectAccessibleAtBothWidths(page);
}

async function teamOf(owner: { session: string; clientId: string }, name: string) {
  const created = await api.post<CreatedClient>('/v1/clients', { name }, { token: owner.session });
  return { clientId: created.body.id, orgKey: created.body.id.slice(7) };
}

const pool = async (session: string) =>
  (await api.get<OwnerBalance>('/v1/owner/balance', { token: session })).body.unallocated_credits;
const membersOf = async (clientId: string, session: string) =>
  (await api.get<List<MemberRow>>(`/v1/clients/${clientId}/members`, { token: session })).body.data;

describe.skipIf(!haveChromium)('organizations in a real browser', () => {
  it('the owner changes a role, removes someone after confirming, renames, and deletes (balance to the pool)', async () => {
    const owner = await createUser(server, { name: 'Olga Owner' });
    const team = await teamOf(owner, 'Team');
    const mia = await createUser(server, { name: 'Mia Member', email: newEmail('mia') });
    const vic = await createUser(server, { name: 'Vic Viewer', email: newEmail('vic') });
    await addMember(server, team.orgKey, mia.userId, 'member');
    await addMember(server, team.orgKey, vic.userId, 'viewer');
    // 7,000 tokens from the personal organization to the pool, then to Team.
    const put = (clientId: string, target: number) =>
      api.put(`/v1/owner/orgs/${clientId}/allocation`, { target_credits: target }, { token: owner.session });
    expect((await put(owner.clientId, 43_000)).status).toBe(200);
    expect((await put(team.clientId, 7_000)).status).toBe(200);
    const poolBefore = await pool(owner.session);

    const { context, page } = await signedIn(browser, server.v2Url, owner);
    await page.goto(`${server.v2Url}/account/clients/${team.clientId}`);
    await checkPage(page);

    // Mia becomes a viewer: the role select of her row and its Save button.
    await page.getByLabel(`Role of ${mia.email}`, { exact: true }).selectOption('viewer');
    await page.getByRole('button', { name: `Save the role of ${mia.email}` }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'role');
    expect(await page.getByRole('status').textContent()).toContain('Role changed');
    expect((await membersOf(team.clientId, owner.session)).find((m) => m.email === mia.email)!.role).toBe(
      'viewer',
    );

    // Removing Vic asks first; Cancel changes nothing, the button on the confirmation page removes.
    await page.getByRole('link', { name: `Remove ${vic.email}…` }).click();
    await page.waitForURL((u) => u.pathname.endsWith(`/members/${vic.userId}/remove`));
    expect(await page.locator('h1').textContent()).toBe('Remove Vic Viewer?');
    await checkPage(page);
    await page.getByRole('link', { name: 'Cancel' }).click();
    expect((await membersOf(team.clientId, owner.session)).map((m) => m.email)).toContain(vic.email);
    await page.getByRole('link', { name: `Remove ${vic.email}…` }).click();
    await page.getByRole('button', { name: 'Remove Vic Viewer' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'removed');
    expect((await membersOf(team.clientId, owner.session)).map((m) => m.email)).not.toContain(vic.email);

    // Rename on the settings page.
    await page.getByRole('link', { name: 'Organization settings' }).click();
    await page.waitForURL((u) => u.pathname.endsWith('/settings'));
    await checkPage(page);
    await page.getByLabel('Organization name').fill('   ');
    await page.getByRole('button', { name: 'Rename' }).click();
    await page.waitForLoadState();
    expect(await page.locator('#f-name-error').textContent()).toContain('Enter a name');
    expect(await page.evaluate('document.activeElement && document.activeElement.id')).toBe('f-name');
    await page.getByLabel('Organization name').fill('Research');
    await page.getByRole('button', { name: 'Rename' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'renamed');
    expect(await page.locator('h1').textContent()).toBe('Research');

    // Delete: a confirmation page that says where the balance goes, then the button.
    await page.getByRole('link', { name: 'Delete organization…' }).click();
    await page.waitForURL((u) => u.pathname.endsWith('/delete'));
    expect(await page.locator('main').textContent()).toContain('7,000 tokens');
    await checkPage(page);
    await page.getByRole('button', { name: 'Delete Research' }).click();
    await page.waitForURL(
      (u) => u.pathname === '/account' && u.searchParams.get('notice') === 'client_deleted',
    );
    expect(await page.getByRole('status').textContent()).toContain('Organization deleted');
    expect(await page.locator('main').textContent()).not.toContain('Research');
    // The ledger, not the page: the 7,000 tokens are back in the pool (no call was in flight).
    await vi.waitFor(async () => expect(await pool(owner.session)).toBe(poolBefore + 7_000), {
      timeout: 30_000,
      interval: 250,
    });

    // The personal organization has no delete, and says why.
    await page.goto(`${server.v2Url}/account/clients/${owner.clientId}/settings`);
    expect(await page.locator('main').textContent()).toContain('This is your personal organization');
    expect(await page.getByRole('link', { name: 'Delete organization…' }).count()).toBe(0);
    expect(await page.locator('h1').textContent()).toBe("Olga Owner's personal organization");
    expect((await page.goto(`${server.v2Url}/account/clients/${owner.clientId}/delete`))!.status()).toBe(404);
    await context.close();
  });

  it('a member sees no owner controls, and leaves after confirming (their token stops working)', async () => {
    const owner = await createUser(server, { name: 'Olga' });
    const team = await teamOf(owner, 'Team');
    const mia = await createUser(server, { name: 'Mia' });
    await addMember(server, team.orgKey, mia.userId, 'member');
    const key = await createApiToken(server, mia, team.orgKey);

    const { context, page } = await signedIn(browser, server.v2Url, mia, 390);
    await page.goto(`${server.v2Url}/account/clients/${team.clientId}`);
    await checkPage(page);
    expect(await page.locator('select[name=role]').count()).toBe(0);
    expect(await page.getByRole('link', { name: /^Remove/ }).count()).toBe(0);
    expect(await page.getByRole('heading', { name: 'Invite by e-mail' }).count()).toBe(0);
    // An owner's form posted by a member changes nothing (the services check the role). The member's
    // page has no form to take a CSRF token from; the dashboard's sign-out form has one.
    const dashboard = await context.newPage();
    await dashboard.goto(`${server.v2Url}/account`);
    const csrf = await dashboard.locator('input[name=csrf_token]').first().getAttribute('value');
    const forged = await context.request.post(
      `${server.v2Url}/account/clients/${team.clientId}/settings/name`,
      {
        form: { csrf_token: csrf!, name: 'Mine' },
        headers: { origin: server.v2Url },
      },
    );
    expect(forged.status()).toBe(404);
    expect((await api.get<List<ClientRow>>('/v1/clients', { token: owner.session })).body.data[1]!.name).toBe(
      'Team',
    );

    await page.getByRole('link', { name: 'Organization settings' }).click();
    await checkPage(page);
    await page.getByRole('link', { name: 'Leave organization…' }).click();
    await page.waitForURL((u) => u.pathname.endsWith('/leave'));
    await checkPage(page);
    await page.getByRole('button', { name: 'Leave Team' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'left');
    expect(await page.getByRole('status').textContent()).toContain('You left');
    expect((await membersOf(team.clientId, owner.session)).map((m) => m.email)).not.toContain(mia.email);
    expect((await api.get('/v1/auth/verify', { token: key.secret })).status).toBe(401);
    await context.close();
  });

  it('invites a person with no account: they register, verify, sign in and accept', async () => {
    const owner = await createUser(server, { name: 'Olga' });
    const team = await teamOf(owner, 'Team');
    const email = newEmail('newcomer');
    const { context, page } = await signedIn(browser, server.v2Url, owner);
    await page.goto(`${server.v2Url}/account/clients/${team.clientId}`);
    // A second invitation, revoked by its button.
    for (const to of [email, newEmail('other')]) {
      await page.getByLabel('E-mail to invite').fill(to);
      await page.getByLabel('Role', { exact: true }).last().selectOption('viewer');
      await page.getByRole('button', { name: 'Send invitation' }).click();
      await page.waitForURL((u) => u.searchParams.get('notice') === 'invited');
    }
    await checkPage(page);
    const openList = page.locator('section[aria-labelledby=h-invite] ul.rows li');
    expect(await openList.count()).toBe(2);
    await page.getByRole('button', { name: /^Revoke the invitation of other-/ }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'invitation_revoked');
    expect(await openList.count()).toBe(1);
    await context.close();

    const [mail] = (await api.get<List<DevMail>>('/dev/mail', { query: { to: email } })).body.data;
    expect(mail!.subject).toBe('You are invited to an organization on svc');
    const link = /(http\S+\/account\/invitations\/accept\?token=\S+)/.exec(mail!.text)![1]!;

    // The invited person, on a phone, with no account.
    const guest = await browser.newContext({ viewport: { width: 390, height: 844 } });
    const p = await guest.newPage();
    await p.goto(link);
    expect(await p.locator('main').textContent()).toContain(`Olga invited ${email} to join Team as viewer`);
    await checkPage(p);
    await p.getByRole('link', { name: `Create one with ${email}` }).click();
    await p.getByLabel('Name').fill('Nia Newcomer');
    expect(await p.getByLabel(/^E-mail/).inputValue()).toBe(email);
    await p.getByLabel(/^Password/).fill(STRONG_PASSWORD);
    await p.getByRole('button', { name: 'Create account' }).click();
    await p.waitForURL((u) => u.pathname === '/account/login');
    const verify = (await api.get<List<DevMail>>('/dev/mail', { query: { to: email } })).body.data.find((m) =>
      /verify/i.test(m.subject),
    );
    await p.goto(/(http\S+\/account\/verify\?token=\S+)/.exec(verify!.text)![1]!);
    expect(await p.getByRole('status').textContent()).toContain('verified');

    // Back to the invitation: sign in (return_to brings them back), then join.
    await p.goto(link);
    await p.getByRole('link', { name: 'Sign in to accept' }).click();
    await p.getByLabel('E-mail').fill(email);
    await p.getByLabel('Password').fill(STRONG_PASSWORD);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.waitForURL((u) => u.pathname === '/account/invitations/accept');
    await checkPage(p);
    await p.getByRole('button', { name: 'Join Team' }).click();
    await p.waitForURL((u) => u.searchParams.get('notice') === 'joined');
    expect(await p.getByRole('status').textContent()).toContain('You joined');
    expect((await membersOf(team.clientId, owner.session)).find((m) => m.email === email)!.role).toBe(
      'viewer',
    );

    // Single use: the link now says so.
    const again = await p.goto(link);
    expect(again!.status()).toBe(409);
    expect(await p.getByRole('alert').textContent()).toContain('already been accepted');
    await guest.close();
  });
});
