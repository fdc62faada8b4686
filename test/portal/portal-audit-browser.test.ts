import { beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import { readJson } from '../helpers/json.js';
import {
  browserSuite,
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  signedIn,
} from '../helpers/browser.js';
import { auditListAnswer } from '../../src/audit/schema.js';

// The audit log pages in a real browser (CONTRACT §11 "The portal shows both, filterable"): the
// organization's log for its owner and a person's own account log show, row for row, what the API
// answers for the same filters and the same page; the filters (action, who, days) and the pager work
// without JavaScript; a member gets no such page; each page is axe-clean at 1280 and at 390 px.

const suite = browserSuite();
let api: ReturnType<typeof client>;
let owner: TestUser;
let member: TestUser;
const today = new Date().toISOString().slice(0, 10);
const todayUnix = Date.parse(`${today}T00:00:00Z`) / 1000;

beforeAll(async () => {
  if (!haveChromium) return;
  api = client(suite.server.url);
  owner = await createUser(suite.server, { name: 'Olga Owner' });
  member = await createUser(suite.server, { name: 'Max Member' });
  const added = await api.post(
    `/v1/clients/${owner.clientId}/members`,
    { email: member.email, role: 'member' },
    { token: owner.session },
  );
  expect(added.status).toBe(200);
  // More events than a page holds: 24 limits set, then the member's role changed.
  for (let i = 1; i <= 24; i++) {
    const set = await api.put(
      `/v1/clients/${owner.clientId}/limits`,
      { rpm: i, tpm: null },
      { token: owner.session },
    );
    expect(set.status).toBe(200);
  }
  const role = await api.patch(
    `/v1/clients/${owner.clientId}/members/${member.userId}`,
    { role: 'viewer' },
    { token: owner.session },
  );
  expect(role.status).toBe(200);
});

/** The API's page of the organization's log (or the person's own) for `query`. */
async function apiPage(path: string, as: TestUser, query: Record<string, string | number> = {}) {
  const res = await api.get(path, { token: as.session, query });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return readJson(auditListAnswer, res.body);
}

/** What the page's table shows: per row, the event id, action and when. */
async function shownRows(page: Page) {
  const rows = page.locator('table[aria-labelledby=h-events] tbody tr');
  const out: { id: string; action: string; when: string; who: string }[] = [];
  for (let i = 0; i < (await rows.count()); i++) {
    const row = rows.nth(i);
    out.push({
      id: (await row.locator('td[data-label=Action] .sub').textContent())!.trim(),
      action: (await row.locator('td[data-label=Action] strong').textContent())!.trim(),
      when: (await row.locator('td[data-label="When (UTC)"]').textContent())!.trim(),
      who: (await row.locator('td[data-label=Who] .who').textContent())!.trim(),
    });
  }
  return out;
}

const whenOf = (unix: number) => new Date(unix * 1000).toISOString().slice(0, 19).replace('T', ' ');

describe.skipIf(!haveChromium)('the audit log pages', () => {
  it("an owner's log shows what the API answers, page by page and filtered", async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner, 1280);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Audit log' }).click();
    await page.waitForURL((u) => u.pathname === `/account/clients/${owner.clientId}/audit-log`);
    expect(await page.getByRole('heading', { level: 1 }).textContent()).toContain('Audit log of');
    const path = `/v1/clients/${owner.clientId}/audit-events`;

    const first = await apiPage(path, owner);
    expect(first.has_more).toBe(true);
    const shown = await shownRows(page);
    expect(shown).toEqual(
      first.data.map((e) => ({
        id: e.id,
        action: e.action,
        when: whenOf(e.created_at),
        who: e.actor.email ?? 'svc (system)',
      })),
    );
    await expectAccessible(page);

    // The next page along the API's cursor.
    await page.getByRole('link', { name: 'Older events →' }).click();
    await page.waitForURL((u) => u.searchParams.get('starting_after') === first.data.at(-1)!.id);
    const second = await apiPage(path, owner, { starting_after: first.data.at(-1)!.id });
    expect((await shownRows(page)).map((r) => r.id)).toEqual(second.data.map((e) => e.id));
    await page.getByRole('link', { name: '← Newest events' }).click();
    await page.waitForURL((u) => !u.searchParams.has('starting_after'));

    // By action.
    await page.getByLabel('Action').selectOption('member.role_changed');
    await page.getByRole('button', { name: 'Show' }).click();
    await page.waitForURL((u) => u.searchParams.get('action') === 'member.role_changed');
    const roles = await apiPage(path, owner, { action: 'member.role_changed' });
    expect(roles.data).toHaveLength(1);
    expect((await shownRows(page)).map((r) => r.id)).toEqual(roles.data.map((e) => e.id));
    expect(await page.locator('td[data-label=Details]').first().textContent()).toContain('to: viewer');

    // By who and by days: today holds them all, tomorrow none.
    await page.getByLabel('Action').selectOption('');
    await page.getByLabel('Who').selectOption({ label: owner.email });
    await page.getByLabel('From (UTC day)').fill(today);
    await page.getByLabel('To (UTC day, included)').fill(today);
    await page.getByRole('button', { name: 'Show' }).click();
    await page.waitForURL((u) => u.searchParams.get('since') === today);
    const byOwnerToday = await apiPage(path, owner, {
      actor_id: owner.userId,
      since: todayUnix,
      until: todayUnix + 86_400,
    });
    expect(byOwnerToday.data.length).toBeGreaterThan(0);
    expect((await shownRows(page)).map((r) => r.id)).toEqual(byOwnerToday.data.map((e) => e.id));
    // The export link carries the same filters, and the page's session reads it.
    const href = await page.getByRole('link', { name: 'Download these events (CSV)' }).getAttribute('href');
    expect(href).toContain(`actor_id=${owner.userId}`);
    const csv = await context.request.get(new URL(href!, suite.server.v2Url).toString());
    expect(csv.status()).toBe(200);
    // The export is the whole filtered log, the page's events among it.
    const lines = (await csv.text()).trimEnd().split('\r\n');
    expect(lines.length - 1).toBeGreaterThanOrEqual(byOwnerToday.data.length);
    for (const e of byOwnerToday.data) expect(lines.some((l) => l.startsWith(`${e.id},`))).toBe(true);
    expect(lines.slice(1).every((l) => l.includes(owner.userId))).toBe(true);

    const tomorrow = new Date((todayUnix + 86_400) * 1000).toISOString().slice(0, 10);
    await page.goto(`${suite.server.v2Url}/account/clients/${owner.clientId}/audit-log?since=${tomorrow}`);
    expect(await page.locator('table[aria-labelledby=h-events]').count()).toBe(0);
    expect(await page.getByText('No events match these filters.').count()).toBe(1);

    // The chain, checked on request.
    await page.goto(`${suite.server.v2Url}/account/clients/${owner.clientId}/audit-log`);
    await page.getByRole('button', { name: 'Check the chain' }).click();
    await page.waitForURL((u) => u.searchParams.get('verify') === '1');
    expect(await page.getByRole('status').textContent()).toContain('The chain is intact');
    await context.close();
  });

  it('at 390 px each event is a card, nothing scrolls sideways, axe-clean', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner, 390);
    await page.goto(`${suite.server.v2Url}/account/clients/${owner.clientId}/audit-log`);
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    expect(await page.locator('table[aria-labelledby=h-events] tbody tr').count()).toBe(20);
    await context.close();
  });

  it('a filter a person got wrong is named beside its field (400), not a 500', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, owner, 1280);
    const res = await page.goto(
      `${suite.server.v2Url}/account/clients/${owner.clientId}/audit-log?since=2026-13-45&action=nope`,
    );
    expect(res?.status()).toBe(400);
    expect(await page.locator('#f-since-error').textContent()).toContain('day');
    expect(await page.locator('#f-action-error').textContent()).toContain('action');
    await expectAccessible(page);
    const unknown = await page.goto(
      `${suite.server.v2Url}/account/clients/${owner.clientId}/audit-log?starting_after=ae_doesnotexist`,
    );
    expect(unknown?.status()).toBe(400);
    await context.close();
  });

  it('a member has no audit log link and gets the not-found page', async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, member, 1280);
    await page.goto(`${suite.server.v2Url}/account/clients/${owner.clientId}/usage`);
    const nav = page.getByRole('navigation', { name: 'Main' });
    expect(await nav.getByRole('link', { name: 'Audit log' }).count()).toBe(0);
    const res = await page.goto(`${suite.server.v2Url}/account/clients/${owner.clientId}/audit-log`);
    expect(res?.status()).toBe(404);
    expect(await page.content()).not.toContain('limits.set');
    await context.close();
  });

  it("a person's account log shows what the API answers, filtered, at 1280 and 390 px", async () => {
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, member, 1280);
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Account' }).click();
    await page.getByRole('link', { name: 'Your account log' }).click();
    await page.waitForURL((u) => u.pathname === '/account/audit-log');
    const all = await apiPage('/v1/account/audit-events', member);
    expect(all.data.some((e) => e.action === 'account.signed_in')).toBe(true);
    expect((await shownRows(page)).map((r) => [r.id, r.action])).toEqual(
      all.data.map((e) => [e.id, e.action]),
    );
    await expectAccessible(page);

    await page.getByLabel('Action').selectOption('account.signed_in');
    await page.getByRole('button', { name: 'Show' }).click();
    await page.waitForURL((u) => u.searchParams.get('action') === 'account.signed_in');
    const signIns = await apiPage('/v1/account/audit-events', member, { action: 'account.signed_in' });
    expect((await shownRows(page)).map((r) => r.id)).toEqual(signIns.data.map((e) => e.id));
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    await context.close();
  });

  it('a wide address in the "Who" list stays inside 390 px', async () => {
    // The filter's "Who" select is as wide as "You (<address>)": an address of wide letters once made
    // the page scroll sideways at 390 px, depending on the letters a random test address drew.
    const wide = await createUser(suite.server, {
      name: 'Wim Wide',
      email: `wwwwwwwwwwwwwwwwwwww-${Date.now().toString(36)}@example.test`,
    });
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, wide, 390);
    await page.goto(`${suite.server.v2Url}/account/audit-log?action=account.signed_in`);
    expect(await page.locator('#f-actor option').allTextContents()).toContain(`You (${wide.email})`);
    await expectNoSidewaysScroll(page);
    await expectAccessible(page);
    await context.close();
  });
});
