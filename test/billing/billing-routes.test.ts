import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { memberships, orgs } from '../../src/db/schema.js';
import { clientIdOf, newOrgKey, orgIdOf } from '../../src/ids.js';
import { reserveCredits, settleCredits } from '../../src/billing/spend.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { anyOf, detailOf } from '../helpers/json.js';
import type {
  Checkout,
  ClientBalance,
  Invoice,
  LedgerEntry,
  OwnerBalance,
  Subscription,
} from '../helpers/answers.js';

// Every billing route's access rules (owner, member, viewer, outsider, no credential) and error paths
// (CONTRACT §3, §8), in dev mode (the dev processor answers payments).

let server: TestServer;
let api: ReturnType<typeof client>;
let owner: TestUser;
let member: TestUser;
let viewer: TestUser;
let outsider: TestUser;

beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
  [owner, member, viewer, outsider] = await Promise.all([
    createUser(server),
    createUser(server),
    createUser(server),
    createUser(server),
  ]);
  await addMember(server, owner.orgKey, member.userId, 'member');
  await addMember(server, owner.orgKey, viewer.userId, 'viewer');
});
afterAll(async () => {
  await server?.close();
});

async function createOrg(user: TestUser, name: string): Promise<string> {
  const key = newOrgKey();
  await server.deps.db.insert(orgs).values({ id: key, name, ownerId: user.userId });
  await server.deps.db.insert(memberships).values({ orgId: key, userId: user.userId, role: 'owner' });
  return key;
}

const urls = {
  success_url: 'https://app.example/ok?s={CHECKOUT_SESSION_ID}',
  cancel_url: 'https://app.example/cancel',
};

describe('access rules (CONTRACT §8)', () => {
  const reads = ['credits/balance', 'credits/transactions', 'invoices', 'payment-methods'];
  const ownerOnly: [string, object][] = [
    ['subscription/checkout', { ...urls }],
    ['credits/topup', { amount_usd: 500, ...urls }],
    ['billing/portal', { return_url: 'https://app.example/billing' }],
  ];

  it('lets the owner and live members read, and refuses viewers and outsiders with 403 NO_ACCESS', async () => {
    for (const path of reads) {
      for (const who of [owner, member]) {
        expect(
          (await api.get(`/v1/clients/${owner.clientId}/${path}`, { token: who.session })).status,
          `${path}`,
        ).toBe(200);
      }
      for (const who of [viewer, outsider]) {
        const res = await api.get(`/v1/clients/${owner.clientId}/${path}`, { token: who.session });
        expect(res.status, `${path}`).toBe(403);
        expect(detailOf(res.body).code).toBe('NO_ACCESS');
      }
      expect((await api.get(`/v1/clients/${owner.clientId}/${path}`)).status).toBe(401);
    }
    // No subscription yet: members read 404 subscription_not_found, others 403.
    expect(
      detailOf(
        (await api.get<Subscription>(`/v1/clients/${owner.clientId}/subscription`, { token: member.session }))
          .body,
      ).code,
    ).toBe('subscription_not_found');
    expect(
      (await api.get<Subscription>(`/v1/clients/${owner.clientId}/subscription`, { token: viewer.session }))
        .status,
    ).toBe(403);
  });

  it('lets only the owner check out, top up and open the portal', async () => {
    for (const [path, body] of ownerOnly) {
      for (const who of [member, viewer, outsider]) {
        const res = await api.post(`/v1/clients/${owner.clientId}/${path}`, body, { token: who.session });
        expect(res.status, `${path}`).toBe(403);
        expect(detailOf(res.body).code).toBe('NO_ACCESS');
      }
      expect((await api.post(`/v1/clients/${owner.clientId}/${path}`, body)).status).toBe(401);
      expect(
        (await api.post(`/v1/clients/${owner.clientId}/${path}`, body, { token: owner.session })).status,
        path,
      ).toBe(200);
    }
  });

  it('accepts an svc_ bearer and either org id spelling; a removed member loses access at once', async () => {
    const mate = await createUser(server);
    await addMember(server, owner.orgKey, mate.userId, 'member');
    const { secret } = await createApiToken(server, mate, owner.orgKey);
    const viaOrg = await api.get<ClientBalance>(`/v1/clients/${orgIdOf(owner.orgKey)}/credits/balance`, {
      token: secret,
    });
    expect(viaOrg.status).toBe(200);
    expect(viaOrg.body.org_id).toBe(owner.clientId);
    await server.deps.db.delete(memberships).where(eq(memberships.userId, mate.userId));
    expect(
      (await api.get<ClientBalance>(`/v1/clients/${owner.clientId}/credits/balance`, { token: secret }))
        .status,
    ).toBe(403);
    expect(
      (await api.get(`/v1/clients/client_doesnotexist/credits/balance`, { token: owner.session })).status,
    ).toBe(403);
    expect((await api.get(`/v1/clients/not-an-id/credits/balance`, { token: owner.session })).status).toBe(
      403,
    );
  });

  it('keeps an svc_ token within its own client (Authentication 1b), where a session reaches every client', async () => {
    const second = await createOrg(owner, 'Second');
    const { secret } = await createApiToken(server, owner, owner.orgKey);
    const other = await api.get<ClientBalance>(`/v1/clients/${clientIdOf(second)}/credits/balance`, {
      token: secret,
    });
    expect(other.status).toBe(403);
    expect(detailOf(other.body).code).toBe('NO_ACCESS');
    const alloc = await api.put<OwnerBalance>(
      `/v1/owner/orgs/${clientIdOf(second)}/allocation`,
      { target_credits: 0 },
      { token: secret },
    );
    expect(alloc.status).toBe(403);
    expect(
      (
        await api.get<ClientBalance>(`/v1/clients/${clientIdOf(second)}/credits/balance`, {
          token: owner.session,
        })
      ).status,
    ).toBe(200);
    expect(
      (await api.get<ClientBalance>(`/v1/clients/${owner.clientId}/credits/balance`, { token: secret }))
        .status,
    ).toBe(200);
  });
});

describe('owner balance and allocation (interface document, Billing rules 1–2)', () => {
  it('shows the caller’s own pool, with global_credits derived', async () => {
    const res = await api.get<OwnerBalance>('/v1/owner/balance', { token: member.session });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      owner_id: member.userId,
      global_credits: 50_000,
      unallocated_credits: 0,
      lifetime_granted_credits: 50_000,
      debt_credits: 0,
      allocations: [
        { org_id: member.clientId, name: anyOf(String), is_default: true, allocated_credits: 50_000 },
      ],
    });
    expect((await api.get<OwnerBalance>('/v1/owner/balance')).status).toBe(401);
  });

  it('sets an absolute target, funding and reclaiming through the pool', async () => {
    const u = await createUser(server);
    const second = await createOrg(u, 'Second');
    let res = await api.put<OwnerBalance>(
      `/v1/owner/orgs/${u.clientId}/allocation`,
      { target_credits: 20_000 },
      { token: u.session },
    );
    expect(res.status).toBe(200);
    expect(res.body.unallocated_credits).toBe(30_000);
    res = await api.put<OwnerBalance>(
      `/v1/owner/orgs/${orgIdOf(second)}/allocation`,
      { target_credits: 30_000 },
      { token: u.session },
    );
    expect(res.body).toMatchObject({ global_credits: 50_000, unallocated_credits: 0 });
    expect(res.body.allocations).toEqual([
      { org_id: u.clientId, name: anyOf(String), is_default: true, allocated_credits: 20_000 },
      { org_id: clientIdOf(second), name: 'Second', is_default: false, allocated_credits: 30_000 },
    ]);
    const bal = await api.get<ClientBalance>(`/v1/clients/${clientIdOf(second)}/credits/balance`, {
      token: u.session,
    });
    expect(bal.body).toEqual({
      org_id: clientIdOf(second),
      balance_credits: 30_000,
      allocation_credits: 30_000,
    });
    // 402 when the raise exceeds the pool; nothing moves.
    res = await api.put<OwnerBalance>(
      `/v1/owner/orgs/${u.clientId}/allocation`,
      { target_credits: 20_001 },
      { token: u.session },
    );
    expect(res.status).toBe(402);
    expect(detailOf(res.body).code).toBe('INSUFFICIENT_UNALLOCATED');
    expect((await api.get<OwnerBalance>('/v1/owner/balance', { token: u.session })).body.global_credits).toBe(
      50_000,
    );
    // Deleting a client returns its tokens to the pool (CONTRACT §5, through the orgDeleted hook).
    await server.deps.db.transaction(async (tx) => {
      await tx.update(orgs).set({ deletedAt: new Date() }).where(eq(orgs.id, second));
      for (const hook of server.deps.hooks.orgDeleted) await hook(tx, { orgKey: second, ownerId: u.userId });
    });
    res = await api.get<OwnerBalance>('/v1/owner/balance', { token: u.session });
    expect(res.body).toMatchObject({ global_credits: 50_000, unallocated_credits: 30_000 });
    expect(res.body.allocations).toHaveLength(1);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('refuses non-owners with 403 NO_ACCESS and bad targets with 400', async () => {
    for (const who of [member, viewer, outsider]) {
      const res = await api.put<OwnerBalance>(
        `/v1/owner/orgs/${owner.clientId}/allocation`,
        { target_credits: 1 },
        { token: who.session },
      );
      expect(res.status).toBe(403);
      expect(detailOf(res.body).code).toBe('NO_ACCESS');
    }
    for (const bad of [{ target_credits: -1 }, { target_credits: 1.5 }, { target_credits: '10' }, {}]) {
      const res = await api.put<OwnerBalance>(`/v1/owner/orgs/${owner.clientId}/allocation`, bad, {
        token: owner.session,
      });
      expect(res.status).toBe(400);
      expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
    }
  });

  it('is atomic under concurrent raises: the pool is never over-allocated', async () => {
    const u = await createUser(server);
    const others = [await createOrg(u, 'A'), await createOrg(u, 'B'), await createOrg(u, 'C')];
    expect(
      (
        await api.put<OwnerBalance>(
          `/v1/owner/orgs/${u.clientId}/allocation`,
          { target_credits: 0 },
          { token: u.session },
        )
      ).status,
    ).toBe(200);
    // Three clients each ask for 20,000 of a 50,000 pool at once: exactly two can have it.
    const results = await Promise.all(
      others.map((key) =>
        api.put<OwnerBalance>(
          `/v1/owner/orgs/${clientIdOf(key)}/allocation`,
          { target_credits: 20_000 },
          { token: u.session },
        ),
      ),
    );
    expect(results.map((r) => r.status).sort()).toEqual([200, 200, 402]);
    const after = await api.get<OwnerBalance>('/v1/owner/balance', { token: u.session });
    expect(after.body).toMatchObject({ global_credits: 50_000, unallocated_credits: 10_000 });
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('refuses to reclaim tokens held by a call in flight with 409 CREDITS_IN_USE', async () => {
    const u = await createUser(server);
    await reserveCredits(server.deps.db, {
      orgKey: u.orgKey,
      userId: u.userId,
      requestId: `req_${u.orgKey}`,
      minCredits: 1,
      maxCredits: 40_000,
    });
    const res = await api.put<OwnerBalance>(
      `/v1/owner/orgs/${u.clientId}/allocation`,
      { target_credits: 1_000 },
      { token: u.session },
    );
    expect(res.status).toBe(409);
    expect(
      (
        await api.put<OwnerBalance>(
          `/v1/owner/orgs/${u.clientId}/allocation`,
          { target_credits: 45_000 },
          { token: u.session },
        )
      ).status,
    ).toBe(200);
  });
});

describe('transactions and pagination (CONTRACT §3)', () => {
  it('lists ledger rows newest first with balance_after_credits; limit/offset validated', async () => {
    const u = await createUser(server);
    await setOrgBalance(server, u.orgKey, 50_000);
    const first = await api.get<LedgerEntry[]>(`/v1/clients/${u.clientId}/credits/transactions`, {
      token: u.session,
    });
    expect(first.body).toEqual([
      {
        id: anyOf(Number),
        org_id: u.clientId,
        amount_credits: 50_000,
        transaction_type: 'trial',
        balance_after_credits: 50_000,
        description: anyOf(String),
        created_at: anyOf(Number),
      },
    ]);
    // Integers written as decimal digits only: hex, exponents, signs, spaces and empty values are 400 too.
    for (const q of [
      { limit: 0 },
      { limit: 101 },
      { offset: -1 },
      { limit: 'x' },
      { limit: '0x10' },
      { limit: '1e1' },
      { limit: '+5' },
      { offset: ' 1' },
      { offset: '' },
      { limit: '1.5' },
    ]) {
      const res = await api.get<LedgerEntry[]>(`/v1/clients/${u.clientId}/credits/transactions`, {
        token: u.session,
        query: q as unknown as Record<string, string | number>,
      });
      expect(res.status, JSON.stringify(q)).toBe(400);
    }
    expect(
      (
        await api.get<LedgerEntry[]>(`/v1/clients/${u.clientId}/credits/transactions`, {
          token: u.session,
          query: { offset: 1 },
        })
      ).body,
    ).toEqual([]);
    // A call's usage shows negative, with the balance after it (CONTRACT §3).
    await reserveCredits(server.deps.db, {
      orgKey: u.orgKey,
      userId: u.userId,
      requestId: `req_tx_${u.orgKey}`,
      minCredits: 1,
      maxCredits: 100,
    });
    await settleCredits(server.deps.db, {
      requestId: `req_tx_${u.orgKey}`,
      actualCredits: 12,
      description: 'chat completion',
    });
    const [usage] = (
      await api.get<LedgerEntry[]>(`/v1/clients/${u.clientId}/credits/transactions`, {
        token: u.session,
        query: { limit: 1 },
      })
    ).body;
    expect(usage).toMatchObject({
      transaction_type: 'usage',
      amount_credits: -12,
      balance_after_credits: 49_988,
      description: 'chat completion',
    });
    expect(
      (
        await api.get<Invoice[]>(`/v1/clients/${u.clientId}/invoices`, {
          token: u.session,
          query: { limit: 1000 },
        })
      ).status,
    ).toBe(400);
  });

  it('accepts any offset ≥ 0 (CONTRACT §3 bounds only limit), answering an empty page past the end', async () => {
    for (const path of ['credits/transactions', 'invoices']) {
      for (const offset of [1_000_000_001, 5_000_000_000, Number.MAX_SAFE_INTEGER]) {
        const res = await api.get(`/v1/clients/${owner.clientId}/${path}`, {
          token: owner.session,
          query: { offset },
        });
        expect([res.status, res.body], `${path} offset=${offset}`).toEqual([200, []]);
      }
    }
  });
});

describe('validation of payment requests', () => {
  it('keeps amount_usd within 100..1,000,000 cents and needs http(s) URLs', async () => {
    for (const amount_usd of [99, 1_000_001, 10.5, '1000']) {
      const res = await api.post<Checkout>(
        `/v1/clients/${owner.clientId}/credits/topup`,
        { amount_usd, ...urls },
        { token: owner.session },
      );
      expect(res.status, String(amount_usd)).toBe(400);
    }
    const bad = await api.post<Checkout>(
      `/v1/clients/${owner.clientId}/credits/topup`,
      { amount_usd: 100, success_url: 'javascript:alert(1)', cancel_url: urls.cancel_url },
      { token: owner.session },
    );
    expect(bad.status).toBe(400);
    expect(
      (await api.post(`/v1/clients/${owner.clientId}/billing/portal`, {}, { token: owner.session })).status,
    ).toBe(400);
  });
});
