import { beforeAll, describe, expect, it, vi } from 'vitest';
import type { Browser } from 'playwright-core';
import type { TestServer } from '../helpers/server.js';
import { addMember, createUser } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import { eventually } from '../helpers/eventually.js';
import {
  expectAccessible,
  expectNoSidewaysScroll,
  browserSuite,
  haveChromium,
  signedIn,
} from '../helpers/browser.js';

// The organization's members page lists its service accounts as principals (CONTRACT §11 "Service
// accounts"): name, role and last use, no key actions, for the owner; in Chromium at 1280 and 390 px,
// axe-core finding no serious or critical violation.

const suite = browserSuite();
vi.setConfig({ testTimeout: 180_000 });
let server: TestServer;
let browser: Browser;
beforeAll(() => {
  ({ server, browser } = suite);
});

interface Listed {
  data: { id: string; name: string; credential: { last_used_at: number | null } | null }[];
}

describe.skipIf(!haveChromium)('service accounts on the members page', () => {
  it('the owner sees each with its role and last use and no key actions; a member does not see them', async () => {
    const owner = await createUser(server, { name: 'Olga Owner' });
    const api = client(server.url);
    const base = `/v1/clients/${owner.clientId}/service-accounts`;
    const ci = await api.post<{ id: string }>(
      base,
      { name: 'ci-deploy', role: 'viewer' },
      { token: owner.session },
    );
    expect(ci.status).toBe(200);
    const bot = await api.post<{ id: string }>(base, { name: 'nightly-bot' }, { token: owner.session });
    const minted = await api.post<{ token: string }>(
      `${base}/${bot.body.id}/tokens`,
      {},
      { token: owner.session },
    );
    const used = await fetch(`${server.url}/v1/models`, {
      headers: { authorization: `Bearer ${minted.body.token}` },
    });
    expect(used.status).toBe(200);
    await eventually(async () => {
      const listed = await api.get<Listed>(base, { token: owner.session });
      return listed.body.data.some((s) => s.id === bot.body.id && s.credential?.last_used_at);
    });

    const page_ = `${server.v2Url}/account/clients/${owner.clientId}`;
    for (const width of [1280, 390]) {
      const { context, page } = await signedIn(browser, server.v2Url, owner, width);
      await page.goto(page_);
      const card = page.locator('section[aria-labelledby="h-service-accounts"]');
      const rows = card.locator('tbody tr');
      await expect.poll(() => rows.count()).toBe(2);
      const ciRow = await rows.filter({ hasText: 'ci-deploy' }).textContent();
      expect(ciRow).toContain('viewer');
      expect(ciRow).toContain('no credential');
      const botRow = await rows.filter({ hasText: 'nightly-bot' }).textContent();
      expect(botRow).toContain('member');
      expect(botRow).toMatch(/\d{4}-\d\d-\d\d \d\d:\d\d/);
      // Principals only: nothing here mints, shows or revokes a key.
      expect(await card.locator('form, button, a').count()).toBe(0);
      await expectAccessible(page);
      await expectNoSidewaysScroll(page);
      await context.close();
    }

    const mate = await createUser(server, { name: 'Mia Member' });
    await addMember(server, owner.orgKey, mate.userId, 'member');
    const asMember = await signedIn(browser, server.v2Url, mate, 390);
    await asMember.page.goto(page_);
    await expect.poll(() => asMember.page.locator('#h-members').count()).toBe(1);
    expect(await asMember.page.locator('section[aria-labelledby="h-service-accounts"]').count()).toBe(0);
    await asMember.context.close();
  });
});
