import { describe, expect, it } from 'vitest';
import { browserSuite, expectAccessible, haveChromium } from '../helpers/browser.js';

// The API reference is a page too: /docs (Swagger UI over /openapi.json) is axe-clean (no serious or
// critical violation) at 1280 and at 390 px, as it first shows and with an operation opened, tried and
// answered (its parameters, the response table, the schemas); the pages link to it; and the document
// says what cost_cents is (decision record 0075): the compute cost, not the charge.

const suite = browserSuite();

describe.skipIf(!haveChromium)('/docs in a real browser', () => {
  // One load of the page serves both widths: Swagger UI lays out by CSS media queries, which a resize
  // applies as a load at that width would; loading it is most of this file's CPU.
  it('is axe-clean at 1280 and 390 px, closed and with an operation run', async () => {
    const context = await suite.browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    await page.goto(`${suite.server.url}/docs`);
    await page.locator('.opblock').first().waitFor({ timeout: 60_000 });
    await page.locator('#servers[aria-label=Server]').waitFor();
    await expectAccessible(page);
    await page.setViewportSize({ width: 390, height: 900 });
    await expectAccessible(page);
    // The first operation opened, "Try it out", Execute: the live response and its table.
    await page.locator('.opblock-summary-control').first().click();
    await page.locator('.try-out__btn').first().click();
    await page.locator('.btn.execute').first().click();
    await page.locator('.live-responses-table').first().waitFor();
    await expectAccessible(page);
    await page.setViewportSize({ width: 1280, height: 900 });
    await expectAccessible(page);
    await context.close();
  });

  it('the pages link to it, and cost_cents says it is the compute cost, not the charge', async () => {
    const page = await (await suite.browser.newContext()).newPage();
    await page.goto(`${suite.server.url}/account/login`);
    expect(await page.locator('footer a[href="/docs"]').textContent()).toBe('API reference');
    await page.context().close();
    const doc = (await (await fetch(`${suite.server.url}/openapi.json`)).json()) as {
      components: { schemas: Record<string, { properties: Record<string, { description?: string }> }> };
    };
    const call = doc.components.schemas.UsageCall!.properties;
    expect(call.cost_cents!.description).toMatch(
      /^The compute cost: .* Not the charge: the charge is credits_debited/,
    );
    expect(call.credits_debited!.description).toContain('credits_debited / 1000 US dollars');
  });
});
