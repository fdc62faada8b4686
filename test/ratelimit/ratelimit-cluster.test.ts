import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { client } from '../helpers/http.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { eventually } from '../helpers/webhook-receiver.js';
import { usageRecords } from '../../src/db/schema.js';

// An organization's rpm held across two svc processes on one PostgreSQL database (CONTRACT §11): 200
// parallel calls split over both, at most `rpm` admitted in the window, every refusal a 429
// rate_limit_exceeded with Retry-After, and the usage records (what was billed) equal to the admitted.

const RPM = 60;
let server: TestServer;
let child: ChildSvc;
let owner: TestUser;
let key: string;

describe.skipIf(storageMode() !== 'postgres')('rate limits across processes', () => {
  beforeAll(async () => {
    const env = { ORG_MAX_CONCURRENCY: '400' };
    server = await startTestServer({ env });
    owner = await createUser(server);
    key = (await createApiToken(server, owner, owner.orgKey)).secret;
    const put = await client(server.url).put(
      `/v1/clients/${owner.clientId}/limits`,
      { rpm: RPM, tpm: null },
      { token: owner.session },
    );
    expect(put.status).toBe(200);
    child = await startChildSvc({ ...env, DATABASE_URL: server.databaseUrl! });
  }, 120_000);
  afterAll(async () => {
    await child?.kill();
    await server?.close();
  });

  it(
    `rpm ${RPM} under 200 parallel calls over two processes admits at most ${RPM}`,
    { timeout: 120_000 },
    async () => {
      const call = (base: string) =>
        fetch(`${base}/v1/chat/completions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }),
        }).then(async (res) => ({
          status: res.status,
          retryAfter: res.headers.get('retry-after'),
          code: res.ok ? null : ((await res.json()) as { error: { code: string } }).error.code,
        }));
      const started = Date.now();
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, i) => call(i % 2 ? server.url : child.url)),
      );
      const elapsed = Date.now() - started;
      const admitted = results.filter((r) => r.status === 200).length;
      const refused = results.filter((r) => r.status === 429);
      // A rolling window admits exactly its limit in a burst shorter than the window: never more, and no
      // call lost to a race (both processes decide against the one window in the database).
      expect(admitted).toBe(RPM);
      expect(refused.length).toBe(200 - admitted);
      for (const r of refused) {
        expect(r.code).toBe('rate_limit_exceeded');
        expect(Number(r.retryAfter)).toBeGreaterThanOrEqual(1);
      }
      // The whole burst fits in one minute's window, so every admitted call is in the same window.
      expect(elapsed).toBeLessThan(60_000);
      await eventually(
        async () =>
          (await server.deps.db.select().from(usageRecords).where(eq(usageRecords.orgKey, owner.orgKey)))
            .length === admitted,
      );
    },
  );
});
