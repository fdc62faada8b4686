import { describe, expect, it } from 'vitest';
import * as oauth from 'oauth4webapi';
import type { Page } from 'playwright-core';
import { createUser } from '../helpers/fixtures.js';
import {
  browserSuite,
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  signedIn,
} from '../helpers/browser.js';
import { createProject } from '../../src/projects/service.js';
import { createReport } from '../../src/projects/content.js';
import { createShareLink } from '../../src/projects/shares.js';

// The consent page and the share page in the portal's card layout, in a real browser:
// each is a card like the sign-in and device pages; a shared document's headings sit under the page's
// own (the brief's `#` under "Brief", a report's `#` under the report's title), so the page has one h1;
// neither scrolls sideways at 390 px, even with a long URL, a wide table or a long code line; axe-core.

const suite = browserSuite();

/** The page's headings, in order, as "h2 Brief". */
const outline = (page: Page) =>
  page.$$eval(
    'main h1, main h2, main h3, main h4, main h5, main h6',
    (els: { tagName: string; textContent: string | null }[]) =>
      els.map((e) => `${e.tagName.toLowerCase()} ${e.textContent?.trim()}`),
  );

describe.skipIf(!haveChromium)('consent and share pages', () => {
  it('the consent page is a card, accessible, with no sideways scroll at 390 px', async () => {
    const user = await createUser(suite.server);
    const url = new URL('/oauth/authorize', suite.server.v2Url);
    url.search = new URLSearchParams({
      client_id: 'svc-cli',
      redirect_uri: 'http://127.0.0.1:9/callback',
      response_type: 'code',
      state: 's',
      code_challenge: await oauth.calculatePKCECodeChallenge(oauth.generateRandomCodeVerifier()),
      code_challenge_method: 'S256',
    }).toString();
    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, user);
    await page.goto(url.href);
    expect(await page.locator('main > .card > h1').textContent()).toMatch(/^Allow .* to use your account\?$/);
    expect(await page.locator('main > .card form button[value=approve]').count()).toBe(1);
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    // A broken request's error page is a card too.
    await page.goto(`${suite.server.v2Url}/oauth/authorize?client_id=svc-cli`);
    expect(await page.locator('main > .card > h1').textContent()).toBe('This sign-in link cannot be used');
    await expectAccessible(page);
    await context.close();
  });

  it("the share page: cards, the documents' headings demoted under the page's own, no sideways scroll", async () => {
    const owner = await createUser(suite.server);
    const db = suite.server.deps.db;
    const actor = { userId: owner.userId };
    const wide = `https://example.test/${'a-very-long-path-segment-'.repeat(12)}`;
    const project = await createProject(db, actor, {
      orgKey: owner.orgKey,
      name: 'Moon survey',
      description: 'What we found',
      brief: `# Goal\n\nMap the far side. See ${wide}.\n\n## Scope\n\n| a | b | c | d | e | f |\n|---|---|---|---|---|---|\n| ${'wide-cell '.repeat(6)} | 2 | 3 | 4 | 5 | 6 |\n`,
    });
    await createReport(db, actor, project.id, {
      title: 'First pass',
      body: `# Findings\n\nCraters.\n\n## Detail\n\n\`\`\`\n${'x'.repeat(300)}\n\`\`\`\n\n####### seven is not a heading\n\n###### Six\n`,
    });
    const link = await createShareLink(
      db,
      suite.server.deps.keys.hmac,
      suite.server.v2Url,
      actor,
      project.id,
    );
    const context = await suite.browser.newContext({ viewport: { width: 1200, height: 900 } });
    const page = await context.newPage();
    await page.goto(link.url);
    expect(await outline(page)).toEqual([
      'h1 Moon survey',
      'h2 Brief',
      'h3 Goal',
      'h4 Scope',
      'h2 Reports',
      'h3 First pass',
      'h4 Findings',
      'h5 Detail',
      'h6 Six',
    ]);
    expect(await page.locator('main > .card').count()).toBe(3);
    await expectAccessible(page);
    await expectNoSidewaysScroll(page);
    // At phone width the wide table scrolls inside its own region, which a keyboard can reach.
    await page.setViewportSize({ width: 390, height: 844 });
    await expectAccessible(page);
    await page.goto(`${suite.server.v2Url}/s/not-a-real-token-at-all-xxxxxxxxxxxxxxx`);
    expect(await page.locator('main > .card > h1').textContent()).toBe('Not found');
    await expectAccessible(page);
    await context.close();
  });
});
