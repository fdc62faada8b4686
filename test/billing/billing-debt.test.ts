import { beforeAll, describe, expect, it } from 'vitest';
import type { TestServer } from '../helpers/server.js';
import type { client } from '../helpers/http.js';
import { checkoutUrls, rid, useStripeServer } from '../helpers/stripe-server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import type { FakeStripe } from '../helpers/fake-stripe.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { reserveCredits, settleCredits } from '../../src/billing/spend.js';
import { detailOf } from '../helpers/json.js';
import type { Checkout, ClientBalance, CreatedClient, OwnerBalance } from '../helpers/answers.js';

// Take-back across clients and the owner's debt (CONTRACT §8 "Debt"): a refund or a lost
// dispute takes back from the client it was bought through, then the pool, then the owner's other
// clients; what is still missing is debt, shown in GET /v1/owner/balance, paid first by every later
// grant, and while it exists no allocation can be raised. Signed webhooks (the stripe SDK's test
// headers) against the real server; the ledger's invariants checked after each step.

const SECRET = 'whsec_test_secret_for_debt';
const stripe = useStripeServer(SECRET);
let fake: FakeStripe;
let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(() => {
  ({ fake, server, api } = stripe.world);
});

const send = stripe.send;
const owner = async (u: TestUser) =>
  (await api.get<OwnerBalance>('/v1/owner/balance', { token: u.session })).body;
const allocate = (u: TestUser, clientId: string, target: number) =>
  api.put<OwnerBalance>(
    `/v1/owner/orgs/${clientId}/allocation`,
    { target_credits: target },
    { token: u.session },
  );

async function paidTopup(u: TestUser, cents: number) {
  const res = await api.post<Checkout>(
    `/v1/clients/${u.clientId}/credits/topup`,
    { amount_usd: cents, ...checkoutUrls },
    { token: u.session },
  );
  expect(res.status).toBe(200);
  const pi = rid('pi');
  await send('checkout.session.completed', {
    ...fake.sessions.get(res.body.session_id)!,
    status: 'complete',
    payment_status: 'paid',
    payment_intent: pi,
  });
  return pi;
}

const dispute = (pi: string, amount: number) => ({
  id: rid('du'),
  object: 'dispute',
  amount,
  currency: 'usd',
  charge: rid('ch'),
  payment_intent: pi,
  status: 'needs_response',
  reason: 'fraudulent',
  created: Math.floor(Date.now() / 1000),
});

describe('take-back across clients, and debt', () => {
  it('a dispute takes back tokens moved to another client of the owner first', async () => {
    const u = await createUser(server);
    const b = (await api.post<CreatedClient>('/v1/clients', { name: 'B' }, { token: u.session })).body as {
      id: string;
    };
    const pi = await paidTopup(u, 100_000); // $1,000 through client A: 1,000,000 tokens
    expect((await allocate(u, u.clientId, 0)).status).toBe(200);
    expect((await allocate(u, b.id, 1_050_000)).status).toBe(200);
    expect((await owner(u)).global_credits).toBe(1_050_000);
    await send('charge.dispute.funds_withdrawn', dispute(pi, 100_000));
    const after = await owner(u);
    // Before: global stayed 1,050,000 with shortfall=1000000.
    expect(after).toMatchObject({ global_credits: 50_000, debt_credits: 0 });
    expect(after.allocations.find((a) => a.org_id === b.id)!.allocated_credits).toBe(50_000);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('what no balance can give is debt: shown, blocks raises, paid first by the next grant, cancelled by a win', async () => {
    const u = await createUser(server);
    const b = (await api.post<CreatedClient>('/v1/clients', { name: 'B' }, { token: u.session })).body as {
      id: string;
    };
    const bKey = b.id.replace(/^client_/, '');
    const pi = await paidTopup(u, 100_000);
    await allocate(u, u.clientId, 0);
    await allocate(u, b.id, 1_050_000);
    // B spends 600,000 through the real spend code.
    const requestId = rid('req');
    await reserveCredits(server.deps.db, {
      orgKey: bKey,
      userId: u.userId,
      requestId,
      minCredits: 600_000,
      maxCredits: 600_000,
    });
    await settleCredits(server.deps.db, { requestId, actualCredits: 600_000, description: 'spent' });
    const d = dispute(pi, 100_000);
    await send('charge.dispute.funds_withdrawn', d);
    let o = await owner(u);
    expect(o).toMatchObject({ global_credits: 0, unallocated_credits: 0, debt_credits: 550_000 });
    expect(await checkInvariants(server.deps.db)).toEqual([]);

    // While in debt: no raise (409), a lowering still works.
    const raise = await allocate(u, b.id, 1);
    expect(raise.status).toBe(409);
    expect(detailOf(raise.body).code).toBe('OWNER_IN_DEBT');
    expect((await allocate(u, b.id, 0)).status).toBe(200);

    // A $100 top-up (100,000 tokens) pays the debt first: nothing reaches the client.
    await paidTopup(u, 10_000);
    o = await owner(u);
    expect(o).toMatchObject({ global_credits: 0, debt_credits: 450_000 });
    expect(o.lifetime_granted_credits).toBe(50_000 + 1_000_000 + 100_000);
    expect(await checkInvariants(server.deps.db)).toEqual([]);

    // The dispute won: the debt still owed is cancelled, what the top-up paid of it comes back to the pool,
    // and what was taken from B is given back.
    await send('charge.dispute.funds_reinstated', { ...d, status: 'won' });
    o = await owner(u);
    expect(o.debt_credits).toBe(0);
    expect(o.global_credits).toBe(450_000 + 100_000);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
    // Out of debt, raises work again.
    expect((await allocate(u, b.id, 100_000)).status).toBe(200);
  });

  it('a refund of spent tokens becomes debt too, and a grant larger than the debt allocates the rest', async () => {
    const u = await createUser(server);
    const pi = await paidTopup(u, 1_000); // 10,000 tokens
    const requestId = rid('req');
    await reserveCredits(server.deps.db, {
      orgKey: u.orgKey,
      userId: u.userId,
      requestId,
      minCredits: 58_000,
      maxCredits: 58_000,
    });
    await settleCredits(server.deps.db, { requestId, actualCredits: 58_000, description: 'spent' });
    await send('refund.created', {
      id: rid('re'),
      object: 'refund',
      amount: 1_000,
      currency: 'usd',
      payment_intent: pi,
      status: 'succeeded',
    });
    expect(await owner(u)).toMatchObject({ global_credits: 0, debt_credits: 8_000 });
    await paidTopup(u, 2_000); // 20,000 tokens: 8,000 pay the debt, 12,000 reach the client
    const o = await owner(u);
    expect(o).toMatchObject({ global_credits: 12_000, debt_credits: 0 });
    const bal = await api.get<ClientBalance>(`/v1/clients/${u.clientId}/credits/balance`, {
      token: u.session,
    });
    expect(bal.body).toMatchObject({ balance_credits: 12_000 });
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });
});
