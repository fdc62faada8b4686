import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, addMember, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { callChat, waitUntil } from '../helpers/chat-load.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { client } from '../helpers/http.js';
import * as schema from '../../src/db/schema.js';
import { billingCustomers, billingPaymentMethods } from '../../src/db/schema.js';
import { queryRows } from '../../src/db/client.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { runAutoTopups } from '../../src/billing/auto-topup.js';
import { devEvents } from '../../src/billing/dev-events.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import { DEV_DECLINED_LAST4 } from '../../src/billing/dev-processor.js';
import type { Deps } from '../../src/deps.js';

// Auto top-up through the dev processor (no Stripe key: it works on a fresh machine).
// When the balance falls below the owner's trigger, one off-session charge per crossing, however many
// calls and processes cross it together; the grant arrives as a signed payment_intent.succeeded through
// the webhook code; the monthly cap holds; a decline turns auto top-up off and tells the owner.

let server: TestServer;
let fake: FakeUpstream;
let pool: pg.Pool | undefined;
/** A second "process": the same code on connections of its own (PostgreSQL), racing the server's. */
let other: Deps;

beforeAll(async () => {
  // A priced provider (fake.env): each call debits 20 tokens, so the calls move the balance.
  fake = await startFakeUpstream();
  server = await startTestServer({ env: fake.env({ ORG_MAX_CONCURRENCY: '64' }) });
  if (storageMode() === 'postgres') {
    pool = new pg.Pool({ connectionString: server.databaseUrl, max: 4 });
    pool.on('error', () => {});
    other = { ...server.deps, db: drizzle(pool, { schema }) };
  } else {
    other = server.deps;
  }
});
afterAll(async () => {
  await pool?.end();
  await server?.close();
  await fake?.close();
});

const api = () => client(server.url);
const deliver = () => devEvents(server.deps).deliver;

/** An owner whose client has a processor customer and a saved card (what a first dev checkout leaves). */
async function ownerWithCard(last4 = '4242'): Promise<TestUser> {
  const owner = await createUser(server);
  const customerId = `cus_dev_${owner.orgKey}`;
  await server.deps.db.insert(billingCustomers).values({ orgKey: owner.orgKey, customerId });
  await server.deps.db.insert(billingPaymentMethods).values({
    id: `pm_dev_${owner.orgKey}`,
    customerId,
    brand: 'visa',
    last4,
    expMonth: 12,
    expYear: 2099,
  });
  return owner;
}

const optIn = (owner: TestUser, body: Record<string, unknown>, as = owner.session) =>
  api().put(`/v1/clients/${owner.clientId}/auto-topup`, body, { token: as });

async function charges(orgKey: string) {
  return queryRows<{
    status: string;
    amount_cents: unknown;
    payment_intent: string | null;
    failure: string | null;
  }>(
    server.deps.db,
    sql`select status, amount_cents, payment_intent, failure from auto_topup_charges where org_key = ${orgKey} order by created_at`,
  );
}

async function autoGrants(orgKey: string): Promise<number[]> {
  const rows = await queryRows<{ amount: unknown }>(
    server.deps.db,
    sql`select amount from billing_entries where key like 'grant:autotopup:%' and to_account = ${`org:${orgKey}`} order by id`,
  );
  return rows.map((r) => Number(r.amount));
}

/** Both "processes" run their passes at once, as their workers would. */
const bothProcesses = () =>
  Promise.all([runAutoTopups(server.deps, deliver()), runAutoTopups(other, deliver())]);

describe('auto top-up: settings', () => {
  it('the owner opts in, changes and opts out; members read; bad input 400', async () => {
    const owner = await ownerWithCard();
    const res = await optIn(owner, { trigger_credits: 5_000, amount_usd: 1_000, monthly_cap_usd: 3_000 });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      client_id: owner.clientId,
      enabled: true,
      trigger_credits: 5_000,
      amount_usd: 1_000,
      monthly_cap_usd: 3_000,
      disabled_reason: null,
      charged_this_month_usd: 0,
    });
    const member = await createUser(server);
    await addMember(server, owner.orgKey, member.userId);
    expect(
      (await optIn(owner, { trigger_credits: 1, amount_usd: 100, monthly_cap_usd: 100 }, member.session))
        .status,
    ).toBe(403);
    const read = await api().get(`/v1/clients/${owner.clientId}/auto-topup`, { token: member.session });
    expect(read.status).toBe(200);
    expect(read.body).toMatchObject({ enabled: true, amount_usd: 1_000 });
    expect((await optIn(owner, { trigger_credits: 1, amount_usd: 1_000, monthly_cap_usd: 500 })).status).toBe(
      400,
    );
    expect((await optIn(owner, { trigger_credits: 1, amount_usd: 50, monthly_cap_usd: 500 })).status).toBe(
      400,
    );
    const off = await api().delete(`/v1/clients/${owner.clientId}/auto-topup`, { token: owner.session });
    expect(off.body).toMatchObject({ enabled: false });
  });
});

describe('auto top-up: charges', () => {
  it('50 concurrent calls crossing the trigger, two processes: one charge, one grant at par; then the cap', async () => {
    const owner = await ownerWithCard();
    const key = (await createApiToken(server, owner, owner.orgKey)).secret;
    const TRIGGER = 20_000;
    // Cap: two charges of 1,000 cents (10,000 tokens each) this month.
    expect(
      (await optIn(owner, { trigger_credits: TRIGGER, amount_usd: 1_000, monthly_cap_usd: 2_000 })).status,
    ).toBe(200);
    await setOrgBalance(server, owner.orgKey, TRIGGER + 1);
    const results = await Promise.all(Array.from({ length: 50 }, () => callChat(server.url, key)));
    expect(results.filter((r) => r.status === 200).length).toBeGreaterThan(0);
    // (The server's own worker may already be charging: the ledger, not the balance, says what was spent.)
    const [usage] = await queryRows<{ spent: unknown }>(
      server.deps.db,
      sql`select coalesce(sum(amount), 0) as spent from billing_entries where type = 'usage' and from_account = ${`org:${owner.orgKey}`}`,
    );
    const spentTo = TRIGGER + 1 - Number(usage!.spent);
    expect(spentTo).toBeLessThan(TRIGGER);

    await bothProcesses();
    await bothProcesses();
    await waitUntil(async () => (await autoGrants(owner.orgKey)).length > 0, 10_000);
    expect(await autoGrants(owner.orgKey)).toEqual([10_000]);
    const first = await charges(owner.orgKey);
    expect(first).toHaveLength(1);
    expect(first[0]).toMatchObject({ status: 'succeeded', amount_cents: expect.anything() as unknown });
    expect(Number(first[0]!.amount_cents)).toBe(1_000);
    expect(await orgBalanceCredits(server.deps.db, owner.orgKey)).toBe(spentTo + 10_000);

    // The balance falls below the trigger again (re-armed by the top-up): a second charge, within the cap.
    await setOrgBalance(server, owner.orgKey, TRIGGER - 1);
    await bothProcesses();
    await waitUntil(async () => (await autoGrants(owner.orgKey)).length > 1, 10_000);
    // A third fall would pass the month's cap (3 × 1,000 > 2,000): skipped, nothing charged.
    await setOrgBalance(server, owner.orgKey, TRIGGER + 5_000);
    await setOrgBalance(server, owner.orgKey, TRIGGER - 1);
    await bothProcesses();
    await bothProcesses();
    const all = await charges(owner.orgKey);
    expect(all.map((c) => c.status)).toEqual(['succeeded', 'succeeded', 'skipped']);
    expect(all[2]!.failure).toBe('monthly cap reached');
    expect(await autoGrants(owner.orgKey)).toEqual([10_000, 10_000]);
    const read = await api().get(`/v1/clients/${owner.clientId}/auto-topup`, { token: owner.session });
    expect(read.body).toMatchObject({ enabled: true, charged_this_month_usd: 2_000 });
    const [events] = await queryRows<{ n: unknown }>(
      server.deps.db,
      sql`select count(*) as n from outbound_events where org_key = ${owner.orgKey} and type = 'topup.succeeded'`,
    );
    expect(Number(events!.n)).toBe(2);
    // Each paid charge has what a checkout's top-up has: a paid invoice row of its amount (with the dev
    // processor's invoice page) and a receipt mail to the owner.
    const invoices = await api().get<{ amount_paid_cents: number; status: string; invoice_pdf: string }[]>(
      `/v1/clients/${owner.clientId}/invoices`,
      { token: owner.session },
    );
    expect(invoices.body.map((i) => [i.amount_paid_cents, i.status])).toEqual([
      [1_000, 'paid'],
      [1_000, 'paid'],
    ]);
    for (const i of invoices.body) expect(i.invoice_pdf).toMatch(/\/dev\/invoices\/in_atu_/);
    const receipts = async () =>
      (
        await api().get<{ data: { subject: string; text: string }[] }>('/dev/mail', {
          query: { to: owner.email },
        })
      ).body.data.filter((m) => m.subject.startsWith('Receipt:'));
    await waitUntil(async () => (await receipts()).length === 2, 10_000);
    for (const m of await receipts()) {
      expect(m.subject).toMatch(/^Receipt: \$10\.00 for /);
      expect(m.text).toContain('An automatic top-up of $10.00');
      expect(m.text).toContain('10,000 tokens · $10.00 added');
    }
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('a declined charge turns auto top-up off, grants nothing and tells the owner (mail, topup.failed)', async () => {
    const owner = await ownerWithCard(DEV_DECLINED_LAST4);
    await optIn(owner, { trigger_credits: 5_000, amount_usd: 500, monthly_cap_usd: 5_000 });
    await setOrgBalance(server, owner.orgKey, 6_000);
    await setOrgBalance(server, owner.orgKey, 4_000);
    await bothProcesses();
    const [charge] = await charges(owner.orgKey);
    expect(charge).toMatchObject({ status: 'failed', failure: 'Your card was declined.' });
    expect(await autoGrants(owner.orgKey)).toEqual([]);
    const read = await api().get(`/v1/clients/${owner.clientId}/auto-topup`, { token: owner.session });
    expect(read.body).toMatchObject({
      enabled: false,
      disabled_reason: 'charge declined: Your card was declined.',
    });
    const mail = await api().get<{ data: { subject: string; text: string }[] }>('/dev/mail', {
      query: { to: owner.email },
    });
    expect(mail.body.data.map((m) => m.subject)).toContain('Auto top-up failed');
    const [events] = await queryRows<{ n: unknown }>(
      server.deps.db,
      sql`select count(*) as n from outbound_events where org_key = ${owner.orgKey} and type = 'topup.failed'`,
    );
    expect(Number(events!.n)).toBe(1);
    // Off: a further fall charges nothing.
    await setOrgBalance(server, owner.orgKey, 6_000);
    await setOrgBalance(server, owner.orgKey, 4_000);
    await bothProcesses();
    expect(await charges(owner.orgKey)).toHaveLength(1);
  });

  it('a payment_intent.succeeded svc did not ask for grants nothing', async () => {
    const owner = await ownerWithCard();
    const before = await orgBalanceCredits(server.deps.db, owner.orgKey);
    await deliver()(
      'payment_intent.succeeded',
      {
        id: 'pi_dev_forged',
        object: 'payment_intent',
        amount: 100_000,
        amount_received: 100_000,
        currency: 'usd',
        customer: `cus_dev_${owner.orgKey}`,
        status: 'succeeded',
        metadata: { org_key: owner.orgKey, auto_topup_charge: 'atu_999999' },
      },
      SYSTEM_ORIGIN,
    );
    expect(await orgBalanceCredits(server.deps.db, owner.orgKey)).toBe(before);
  });
});
