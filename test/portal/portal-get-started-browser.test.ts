import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import {
  expectAccessible,
  expectNoSidewaysScroll,
  haveChromium,
  browserSuite,
  signedIn,
} from '../helpers/browser.js';

// The "Get started" card of a new account's /account (docs/portal.md "What a person finds where"): the
// terminal, a first curl call against this server with the two ways to get a credential, and links to
// the API reference, buying tokens and usage; it goes once the person has made a call. The HTTP steps
// it shows are run as written. Chromium at 1280 and 390 px, axe on both.

let fake: FakeUpstream;
beforeAll(async () => {
  if (haveChromium) fake = await startFakeUpstream();
});
afterAll(async () => {
  await fake?.close();
});
const suite = browserSuite(() => ({ env: fake.env() }));
let person: TestUser;

beforeAll(async () => {
  if (haveChromium) person = await createUser(suite.server, { name: 'New Person' });
});

describe.skipIf(!haveChromium)('the Get started card', () => {
  it('a new account sees how to start, at 1280 and 390 px; the card is gone after the first call', async () => {
    for (const width of [1280, 390]) {
      const { context, page } = await signedIn(suite.browser, suite.server.v2Url, person, width);
      await page.goto(`${suite.server.v2Url}/account`);
      const card = page.locator('section[aria-labelledby=h-start]');
      expect(await card.getByRole('heading', { name: 'Get started' }).count()).toBe(1);
      const text = (await card.textContent()) ?? '';
      expect(text).toContain(`svc login --url ${suite.server.v2Url}`);
      expect(text).toContain(`curl ${suite.server.v2Url}/v1/chat/completions`);
      expect(text).toContain(`${suite.server.v2Url}/v1/tokens`);
      expect(await card.getByRole('link', { name: 'the API reference' }).getAttribute('href')).toBe('/docs');
      expect(await card.getByRole('link', { name: 'buy tokens' }).getAttribute('href')).toBe(
        `/account/clients/${person.clientId}/billing#buy`,
      );
      expect(await card.getByRole('link', { name: 'see your usage' }).getAttribute('href')).toBe(
        `/account/clients/${person.clientId}/usage`,
      );
      await expectAccessible(page);
      await expectNoSidewaysScroll(page);
      await context.close();
    }

    // The card's HTTP path, as written: a session from POST /v1/login, an API token from POST /v1/tokens,
    // then the chat completion with it.
    const login = await client(suite.server.v2Url).post<{ session_token: string }>('/v1/login', {
      email: person.email,
      password: person.password,
    });
    expect(login.status).toBe(200);
    const minted = await client(suite.server.v2Url).post<{ token: string }>(
      '/v1/tokens',
      { token_name: 'laptop' },
      { token: login.body.session_token },
    );
    expect(minted.status).toBe(200);
    const sdk = new OpenAI({ apiKey: minted.body.token, baseURL: `${suite.server.v2Url}/v1`, maxRetries: 0 });
    await sdk.chat.completions.create({ model: 'anything', messages: [{ role: 'user', content: 'Hello' }] });

    const { context, page } = await signedIn(suite.browser, suite.server.v2Url, person);
    await page.goto(`${suite.server.v2Url}/account`);
    expect(await page.locator('section[aria-labelledby=h-start]').count()).toBe(0);
    expect(await page.getByRole('heading', { name: 'Connect a terminal' }).count()).toBe(1);
    expect(await page.getByRole('link', { name: 'its reference' }).getAttribute('href')).toBe('/docs');
    await context.close();
  });
});
