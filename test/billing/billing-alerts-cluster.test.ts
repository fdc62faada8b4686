import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { createApiToken, createUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { client } from '../helpers/http.js';
import type { DevMail } from '../helpers/answers.js';
import { eventually } from '../helpers/eventually.js';
import { signatureValid, startReceiver, type Receiver } from '../helpers/webhook-receiver.js';
import { outboxDrained } from '../helpers/outbox.js';
import { queryRows } from '../../src/db/client.js';
import { checkInvariants } from '../../src/billing/invariants.js';

// Across processes (PostgreSQL): 50 model calls on two svc processes sharing one
// database fall below the owner's threshold together. The crossing is recorded once (in the settle that
// made it), handled once by one of the two alert workers, mailed once and delivered once.

const env = {
  MODEL_PRICE_INPUT: '300000',
  MODEL_PRICE_OUTPUT: '1500000',
  ORG_MAX_CONCURRENCY: '64',
};

describe.skipIf(storageMode() !== 'postgres')('low-balance alert with two svc processes', () => {
  let server: TestServer;
  let second: ChildSvc;
  let receiver: Receiver;

  beforeAll(async () => {
    server = await startTestServer({ env });
    second = await startChildSvc({ ...env, DATABASE_URL: server.databaseUrl! });
    receiver = await startReceiver();
  }, 120_000);
  afterAll(async () => {
    await receiver?.close();
    await second?.kill();
    await server?.close();
  });

  it('50 concurrent calls crossing together: one crossing, one event, one mail, one delivery', async () => {
    const api = client(server.url);
    const u = await createUser(server);
    const { secret: token } = await createApiToken(server, u, u.orgKey);
    const created = await api.post(
      `/v1/clients/${u.clientId}/webhook-endpoints`,
      { url: receiver.url, events: ['balance.low'] },
      { token: u.session },
    );
    const secret = (created.body as { secret: string }).secret;
    await api.put(
      `/v1/clients/${u.clientId}/balance-alert`,
      { threshold_credits: 19_000 },
      { token: u.session },
    );
    // The balance covers all 50 holds at once (each holds the most its call can cost, about 220 here), so
    // none is refused with 402; what they spend (at least 20 each) takes it below the threshold.
    await setOrgBalance(server, u.orgKey, 20_000);

    const sdks = [server.url, second.url].map(
      (base) => new OpenAI({ apiKey: token, baseURL: `${base}/v1`, maxRetries: 0, timeout: 60_000 }),
    );
    const results = await Promise.allSettled(
      Array.from({ length: 50 }, (_, i) =>
        sdks[i % 2]!.chat.completions.create({
          model: 'svc-local',
          messages: [{ role: 'user', content: 'Say hello' }],
          max_tokens: 8,
        }),
      ),
    );
    const refused = results.flatMap((r) => (r.status === 'rejected' ? [String(r.reason)] : []));
    expect(refused).toEqual([]);
    const [acct] = await queryRows<{ balance: unknown }>(
      server.deps.db,
      sql`select balance from billing_accounts where id = ${`org:${u.orgKey}`}`,
    );
    expect(Number(acct!.balance)).toBeLessThan(19_000);
    expect(Number(acct!.balance)).toBeGreaterThan(0);

    const count = async (table: string) => {
      const [row] = await queryRows<{ n: unknown }>(
        server.deps.db,
        sql`select count(*) as n from ${sql.identifier(table)} where org_key = ${u.orgKey}`,
      );
      return Number(row!.n);
    };
    await eventually(() => receiver.received.length >= 1, 20_000);
    // Both workers done: every crossing handled and every delivery answered, so any duplicate is here.
    await eventually(() => outboxDrained(server.deps.db, u.orgKey), 20_000, 'the outbox drained');
    expect(await count('balance_crossings')).toBe(1);
    expect(await count('outbound_events')).toBe(1);
    expect(receiver.received).toHaveLength(1);
    expect(
      signatureValid(secret, receiver.received[0]!.headers['svc-signature'], receiver.received[0]!.body),
    ).toBe(true);
    // The mail goes out once its crossing's transaction committed (after the event).
    const lowMails = async () =>
      (await api.get<{ data: DevMail[] }>('/dev/mail', { query: { to: u.email } })).body.data.filter((m) =>
        /below 19,000 tokens/.test(m.subject),
      );
    await eventually(async () => (await lowMails()).length >= 1, 20_000, 'the low-balance mail');
    expect(await lowMails()).toHaveLength(1);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  }, 120_000);
});
