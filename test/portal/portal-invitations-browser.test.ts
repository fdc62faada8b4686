import { describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { createUser, STRONG_PASSWORD } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import type { CreatedClient, MemberRow, Page as List } from '../helpers/answers.js';
import { browserSuite, expectAccessibleAtBothWidths, haveChromium, signedIn } from '../helpers/browser.js';
import { mails, newEmail } from '../helpers/accounts-support.js';

// Invitations that survive sign-up, in a real browser: the invitation's "Create one" opens registration
// with the invited address filled in and read-only; the verification link leads straight on to "Join
// <organization>"; an address edited past the read-only field registers without the invitation. On the
// members page: "Add a member" for an address with no account offers "Invite instead" (same address and
// role, one click), "Send again" mails a new link, and people added, re-roled or removed get a mail.
// Every page: axe-core clean, and no sideways scroll at 390 px.

const suite = browserSuite();
const api = () => client(suite.server.url);

async function checkPage(page: Page) {
  await expectAccessibleAtBothWidths(page);
}

async function team(name = 'Team') {
  const owner = await createUser(suite.server, { name: 'Olga' });
  const created = await api().post<CreatedClient>('/v1/clients', { name }, { token: owner.session });
  return { owner, clientId: created.body.id };
}

const membersOf = async (clientId: string, session: string) =>
  (await api().get<List<MemberRow>>(`/v1/clients/${clientId}/members`, { token: session })).body.data;

const linkIn = (text: string, path: string) =>
  new RegExp(`(http\\S+${path.replace(/[/?]/g, '\\$&')}\\S+)`).exec(text)![1]!;

describe.skipIf(!haveChromium)('invitations through sign-up', () => {
  it('registration keeps the invited address; verification leads straight on to "Join <organization>"', async () => {
    const { owner, clientId } = await team('Research');
    const email = newEmail('nia');
    const invited = await api().post(
      `/v1/clients/${clientId}/invitations`,
      { email, role: 'viewer' },
      { token: owner.session },
    );
    expect(invited.status).toBe(200);
    const link = linkIn((await mails(api(), email))[0]!.text, '/account/invitations/accept?token=');

    const guest = await suite.browser.newContext({ viewport: { width: 390, height: 844 } });
    const p = await guest.newPage();
    await p.goto(link);
    await p.getByRole('link', { name: `Create one with ${email}` }).click();
    await p.waitForURL((u) => u.pathname === '/account/register' && u.searchParams.has('invitation'));
    expect(await p.locator('main').textContent()).toContain('You are invited to join Research');
    const address = p.getByLabel(/^E-mail/);
    expect(await address.inputValue()).toBe(email);
    expect(await address.getAttribute('readonly')).not.toBeNull();
    await checkPage(p);

    // A weak password first: the page comes back with the invitation, the address and focus on the password.
    await p.getByLabel('Name').fill('Nia Newcomer');
    await p.getByLabel(/^Password/).fill('short');
    await p.getByRole('button', { name: 'Create account' }).click();
    await p.waitForLoadState();
    expect(await p.locator('#f-password-error').count()).toBe(1);
    expect(await p.evaluate('document.activeElement && document.activeElement.id')).toBe('f-password');
    expect(await p.getByLabel(/^E-mail/).inputValue()).toBe(email);
    expect(await p.getByLabel('Name').inputValue()).toBe('Nia Newcomer');
    await p.getByLabel(/^Password/).fill(STRONG_PASSWORD);
    await p.getByRole('button', { name: 'Create account' }).click();
    await p.waitForURL((u) => u.pathname === '/account/login');
    expect(new URL(p.url()).searchParams.get('return_to')).toContain('/account/invitations/accept?token=');

    // The verification mail's link, opened in this (signed-out) browser: sign in, and the next page is the
    // invitation with its Join button.
    const verify = (await mails(api(), email)).find((m) => /verify/i.test(m.subject))!;
    await p.goto(linkIn(verify.text, '/account/verify?token='));
    await p.waitForURL((u) => u.pathname === '/account/login' && u.searchParams.get('verified') === '1');
    expect(await p.getByRole('status').textContent()).toContain('verified');
    await p.getByLabel('E-mail').fill(email);
    await p.getByLabel('Password').fill(STRONG_PASSWORD);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.waitForURL((u) => u.pathname === '/account/invitations/accept');
    await checkPage(p);
    await p.getByRole('button', { name: 'Join Research' }).click();
    await p.waitForURL((u) => u.searchParams.get('notice') === 'joined');
    expect((await membersOf(clientId, owner.session)).find((m) => m.email === email)?.role).toBe('viewer');
    await guest.close();
  });

  it('signed in before verifying: the verification link goes straight to the Join button', async () => {
    const { owner, clientId } = await team('Lab');
    const email = newEmail('sam');
    await api().post(`/v1/clients/${clientId}/invitations`, { email }, { token: owner.session });
    const link = linkIn((await mails(api(), email))[0]!.text, '/account/invitations/accept?token=');
    const guest = await suite.browser.newContext({ viewport: { width: 1280, height: 900 } });
    const p = await guest.newPage();
    await p.goto(link);
    await p.getByRole('link', { name: `Create one with ${email}` }).click();
    await p.getByLabel('Name').fill('Sam');
    await p.getByLabel(/^Password/).fill(STRONG_PASSWORD);
    await p.getByRole('button', { name: 'Create account' }).click();
    await p.waitForURL((u) => u.pathname === '/account/login');
    await p.getByLabel('E-mail').fill(email);
    await p.getByLabel('Password').fill(STRONG_PASSWORD);
    await p.getByRole('button', { name: 'Sign in' }).click();
    // Back on the invitation, which asks for the verification first.
    await p.waitForURL((u) => u.pathname === '/account/invitations/accept');
    expect(await p.locator('main').textContent()).toContain('Verify your e-mail address first');
    const verify = (await mails(api(), email)).find((m) => /verify/i.test(m.subject))!;
    await p.goto(linkIn(verify.text, '/account/verify?token='));
    await p.waitForURL((u) => u.pathname === '/account/invitations/accept');
    await p.getByRole('button', { name: 'Join Lab' }).click();
    await p.waitForURL((u) => u.searchParams.get('notice') === 'joined');
    expect((await membersOf(clientId, owner.session)).map((m) => m.email)).toContain(email);
    await guest.close();
  });

  it('an address edited past the read-only field registers without the invitation', async () => {
    const { owner, clientId } = await team();
    const email = newEmail('inv');
    await api().post(`/v1/clients/${clientId}/invitations`, { email }, { token: owner.session });
    const link = linkIn((await mails(api(), email))[0]!.text, '/account/invitations/accept?token=');
    const guest = await suite.browser.newContext();
    const p = await guest.newPage();
    await p.goto(link);
    await p.getByRole('link', { name: `Create one with ${email}` }).click();
    const other = newEmail('elsewhere');
    await p.evaluate(`document.getElementById('f-email').removeAttribute('readonly')`);
    await p.getByLabel(/^E-mail/).fill(other);
    await p.getByLabel('Name').fill('Eve');
    await p.getByLabel(/^Password/).fill(STRONG_PASSWORD);
    await p.getByRole('button', { name: 'Create account' }).click();
    await p.waitForURL((u) => u.pathname === '/account/login');
    expect(new URL(p.url()).searchParams.get('return_to')).toBeNull();
    const verify = (await mails(api(), other)).find((m) => /verify/i.test(m.subject))!;
    expect(verify.text).not.toContain('invitation=');
    await guest.close();
  });
});

describe.skipIf(!haveChromium)('the members page', () => {
  it('"Invite instead" for an address with no account; "Send again"; mails to people added, re-roled, removed', async () => {
    const { owner, clientId } = await team();
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner, 390);
    await page.goto(`${suite.server.v2Url}/account/clients/${clientId}`);

    // No account with this address: the error beside the field, and one click invites it as viewer.
    const nobody = newEmail('nobody');
    await page.getByLabel('E-mail', { exact: true }).fill(nobody);
    await page.locator('#f-role').selectOption('viewer');
    await page.getByRole('button', { name: 'Add member' }).click();
    await page.waitForLoadState();
    expect(await page.locator('#f-email-error').textContent()).toContain('No registered, verified account');
    expect(await page.evaluate('document.activeElement && document.activeElement.id')).toBe('f-email');
    expect(await page.locator('#f-role').inputValue()).toBe('viewer');
    await checkPage(page);
    await page.getByRole('button', { name: 'Invite instead' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'invited');
    const invitations = await api().get<{ data: { email: string; role: string; status: string }[] }>(
      `/v1/clients/${clientId}/invitations`,
      { token: owner.session },
    );
    expect(invitations.body.data).toMatchObject([{ email: nobody, role: 'viewer', status: 'pending' }]);
    expect(await mails(api(), nobody)).toHaveLength(1);

    // Send again: a second mail with a new link; the first link no longer opens the invitation.
    const firstLink = linkIn((await mails(api(), nobody))[0]!.text, '/account/invitations/accept?token=');
    await page.getByRole('button', { name: `Send the invitation of ${nobody} again` }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'invitation_resent');
    expect(await page.getByRole('status').textContent()).toContain('Invitation sent again');
    const sent = await mails(api(), nobody);
    expect(sent).toHaveLength(2);
    expect(linkIn(sent[0]!.text, '/account/invitations/accept?token=')).not.toBe(firstLink);
    expect((await page.request.get(firstLink)).status()).toBe(404);
    // The mailbox's hourly bound (an invitation and one re-send) says no, on a page.
    await page.getByRole('button', { name: `Send the invitation of ${nobody} again` }).click();
    await page.waitForLoadState();
    expect(await page.getByRole('alert').textContent()).toContain('Too many attempts');
    expect(await mails(api(), nobody)).toHaveLength(2);
    await checkPage(page);

    // Added, re-roled, removed: the person is mailed each time.
    const mia = await createUser(suite.server, { name: 'Mia' });
    await page.goto(`${suite.server.v2Url}/account/clients/${clientId}`);
    await page.getByLabel('E-mail', { exact: true }).fill(mia.email);
    await page.getByRole('button', { name: 'Add member' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'added');
    await page.getByLabel(`Role of ${mia.email}`, { exact: true }).selectOption('viewer');
    await page.getByRole('button', { name: `Save the role of ${mia.email}` }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'role');
    await page.getByRole('link', { name: `Remove ${mia.email}…` }).click();
    await page.getByRole('button', { name: 'Remove Mia' }).click();
    await page.waitForURL((u) => u.searchParams.get('notice') === 'removed');
    const subjects = (await mails(api(), mia.email))
      .map((m) => m.subject)
      .filter((s) => /organization/.test(s));
    expect(subjects.reverse()).toEqual([
      'You were added to an organization on svc',
      'Your role in an organization on svc changed',
      'You were removed from an organization on svc',
    ]);
    await context.close();
  });
});
