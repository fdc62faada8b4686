import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { client } from '../helpers/http.js';
import type { DevMail } from '../helpers/answers.js';
import { eventually } from '../helpers/eventually.js';
import {
  deliverWebhook,
  signatureFor,
  startFakeStripe,
  stripeEnv,
  stripeEvent,
  type FakeStripe,
} from '../helpers/fake-stripe.js';
import { queryRows } from '../../src/db/client.js';
import { billingCustomers } from '../../src/db/schema.js';
import { checkInvariants } from '../../src/billing/invariants.js';

// Across processes (PostgreSQL): two svc processes on one database, each running its own
// auto top-up worker against the stripe fake (the stripe SDK in each), and 50 concurrent chat calls split
// across them falling below the trigger together. Exactly one PaymentIntent, exactly one grant however
// often and wherever its payment_intent.succeeded arrives, a second crossing beyond the monthly cap
// charges nothing, and a declined card turns auto top-up off and tells the owner once.

const WEBHOOK_SECRET = 'whsec_auto_topup_cluster';
const env = {
  MODEL_PRICE_INPUT: '300000',
  MODEL_PRICE_OUTPUT: '1500000',
  ORG_MAX_CONCURRENCY: '64',
  METRICS_TOKEN: 'metrics-auto-topup-cluster',
};
const TRIGGER = 19_000;

describe.skipIf(storageMode() !== 'postgres')('auto top-up with two svc processes (stripe fake)', () => {
  let fake: FakeStripe;
  let server: TestServer;
  let second: ChildSvc;

  beforeAll(async () => {
    fake = await startFakeStripe();
    const all = { ...env, ...stripeEnv(fake, WEBHOOK_SECRET) };
    server = await startTestServer({ env: all });
    second = await startChildSvc({ ...all, DATABASE_URL: server.databaseUrl! });
  }, 120_000);
  afterAll(async () => {
    await second?.kill();
    await server?.close();
    await fake?.close();
  });

  const db = () => server.deps.db;
  const api = () => client(server.url);

  async function ownerWithCard(card: string, declined: boolean): Promise<TestUser & { customerId: string }> {
    const owner = await createUser(server);
    const customerId = `cus_cluster_${owner.orgKey}`;
    fake.customers.set(customerId, {
      id: customerId,
      object: 'customer',
      invoice_settings: { default_payment_method: card },
    });
    fake.paymentMethods.push({
      id: card,
      object: 'payment_method',
      customer: customerId,
      type: 'card',
      card: { brand: 'visa', last4: declined ? '0002' : '4242', exp_month: 12, exp_year: 2099 },
    });
    if (declined) fake.declinedMethods.add(card);
    await db().insert(billingCustomers).values({ orgKey: owner.orgKey, customerId });
    // One charge of 10.00 USD a month at most: the cap allows exactly one.
    const put = await api().put(
      `/v1/clients/${owner.clientId}/auto-topup`,
      { trigger_credits: TRIGGER, amount_usd: 1_000, monthly_cap_usd: 1_000 },
      { token: owner.session },
    );
    expect(put.status).toBe(200);
    return { ...owner, customerId };
  }

  /** 50 concurrent chat calls, alternating between the two processes, taking 20,000 below the trigger. */
  async function crossTogether(owner: TestUser) {
    const { secret: token } = await createApiToken(server, owner, owner.orgKey);
    // The balance covers all 50 holds at once, so none is refused; what they spend crosses the trigger.
    await setOrgBalance(server, owner.orgKey, 20_000);
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
    expect(results.flatMap((r) => (r.status === 'rejected' ? [String(r.reason)] : []))).toEqual([]);
    expect(await balance(owner.orgKey)).toBeLessThan(TRIGGER);
  }

  async function balance(orgKey: string): Promise<number> {
    const [row] = await queryRows<{ balance: unknown }>(
      db(),
      sql`select balance from billing_accounts where id = ${`org:${orgKey}`}`,
    );
    return Number(row!.balance);
  }

  const intentRequests = (customerId: string) =>
    fake.requests.filter((r) => r.path === '/v1/payment_intents' && r.params.get('customer') === customerId);
  const intents = (customerId: string) =>
    [...fake.paymentIntents.values()].filter((p) => p.customer === customerId);

  async function charges(orgKey: string) {
    return queryRows<{ id: string; status: string; failure: string | null; payment_intent: string | null }>(
      db(),
      sql`select id, status, failure, payment_intent from auto_topup_charges where org_key = ${orgKey} order by created_at`,
    );
  }
  async function grants(orgKey: string) {
    const rows = await queryRows<{ amount: unknown }>(
      db(),
      sql`select amount from billing_entries where key like 'grant:autotopup:%' and to_account = ${`org:${orgKey}`}`,
    );
    return rows.map((r) => Number(r.amount));
  }
  /** A process's completed auto top-up worker passes (`svc_auto_topup_passes_total` at GET /metrics). */
  async function workerPasses(base: string): Promise<number> {
    const res = await fetch(`${base}/metrics`, { headers: { authorization: `Bearer ${env.METRICS_TOKEN}` } });
    expect(res.status).toBe(200);
    const line = /^svc_auto_topup_passes_total (\d+)$/m.exec(await res.text());
    return Number(line?.[1] ?? 0);
  }
  /**
   * Waits until each process's worker has completed two more passes than now: the second began after
   * this call, so whatever a pass would do about the state now (a second charge, say) has been done.
   */
  async function bothWorkersPassed() {
    const bases = [server.url, second.url];
    const start = await Promise.all(bases.map(workerPasses));
    await eventually(
      async () => (await Promise.all(bases.map(workerPasses))).every((n, i) => n >= start[i]! + 2),
      20_000,
      'two more auto top-up passes in each process',
    );
  }

  it('50 calls on two processes cross together: one PaymentIntent, one grant; a crossing beyond the cap charges nothing', async () => {
    const owner = await ownerWithCard(`pm_cluster_ok_${Date.now()}`, false);
    await crossTogether(owner);

    await eventually(() => intentRequests(owner.customerId).length >= 1, 20_000);
    await bothWorkersPassed();
    expect(intentRequests(owner.customerId)).toHaveLength(1);
    expect(intents(owner.customerId)).toHaveLength(1);
    const [crossing] = await queryRows<{ n: unknown }>(
      db(),
      sql`select count(*) as n from balance_crossings where org_key = ${owner.orgKey} and purpose = 'auto_topup'`,
    );
    expect(Number(crossing!.n)).toBe(1);
    expect((await charges(owner.orgKey)).map((c) => c.status)).toEqual(['charged']);
    expect(await grants(owner.orgKey)).toEqual([]); // nothing before the processor says it was paid

    // Stripe delivers payment_intent.succeeded, and (at least once) again: to both processes at once.
    const intent = intents(owner.customerId)[0]!;
    const before = await balance(owner.orgKey);
    const answers = await Promise.all(
      [server.url, second.url, server.url, second.url].map((base) => {
        const payload = stripeEvent('payment_intent.succeeded', intent);
        return deliverWebhook(base, payload, signatureFor(payload, WEBHOOK_SECRET));
      }),
    );
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);
    expect(await grants(owner.orgKey)).toEqual([10_000]);
    expect(await balance(owner.orgKey)).toBe(before + 10_000);
    expect((await charges(owner.orgKey)).map((c) => c.status)).toEqual(['succeeded']);

    // The grant re-armed the trigger; the next fall below it is a new crossing, but the month's cap
    // (10.00 USD) is spent: recorded as skipped, nothing asked of the processor.
    expect(await balance(owner.orgKey)).toBeGreaterThanOrEqual(TRIGGER);
    await setOrgBalance(server, owner.orgKey, TRIGGER - 1_000);
    await eventually(async () => (await charges(owner.orgKey)).length === 2, 20_000);
    await bothWorkersPassed();
    const after = await charges(owner.orgKey);
    expect(after.map((c) => [c.status, c.failure])).toEqual([
      ['succeeded', null],
      ['skipped', 'monthly cap reached'],
    ]);
    expect(intentRequests(owner.customerId)).toHaveLength(1);
    expect(await grants(owner.orgKey)).toEqual([10_000]);
    const read = await api().get<{ enabled: boolean; charged_this_month_usd: number }>(
      `/v1/clients/${owner.clientId}/auto-topup`,
      { token: owner.session },
    );
    expect(read.body).toMatchObject({ enabled: true, charged_this_month_usd: 1_000 });
    expect(await checkInvariants(db())).toEqual([]);
  }, 180_000);

  it('a declined card: one PaymentIntent, auto top-up off, the owner mailed once and told by topup.failed, no grant', async () => {
    const owner = await ownerWithCard(`pm_cluster_declined_${Date.now()}`, true);
    await crossTogether(owner);

    await eventually(async () => (await charges(owner.orgKey))[0]?.status === 'failed', 20_000);
    await bothWorkersPassed();
    expect(intentRequests(owner.customerId)).toHaveLength(1);
    expect((await charges(owner.orgKey)).map((c) => [c.status, c.failure])).toEqual([
      ['failed', 'Your card was declined.'],
    ]);
    const read = await api().get(`/v1/clients/${owner.clientId}/auto-topup`, { token: owner.session });
    expect(read.body).toMatchObject({
      enabled: false,
      disabled_reason: 'charge declined: Your card was declined.',
    });
    expect(await grants(owner.orgKey)).toEqual([]);
    const [events] = await queryRows<{ n: unknown }>(
      db(),
      sql`select count(*) as n from outbound_events where org_key = ${owner.orgKey} and type = 'topup.failed'`,
    );
    expect(Number(events!.n)).toBe(1);
    const mails = await api().get<{ data: DevMail[] }>('/dev/mail', { query: { to: owner.email } });
    expect(mails.body.data.filter((m) => m.subject === 'Auto top-up failed')).toHaveLength(1);

    // Off means off: the next crossing asks the processor for nothing.
    await setOrgBalance(server, owner.orgKey, 25_000);
    await setOrgBalance(server, owner.orgKey, 10_000);
    await bothWorkersPassed();
    expect(intentRequests(owner.customerId)).toHaveLength(1);
    expect(await charges(owner.orgKey)).toHaveLength(1);
    expect(await checkInvariants(db())).toEqual([]);
  }, 180_000);
});
