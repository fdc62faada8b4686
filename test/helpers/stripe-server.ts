import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect } from 'vitest';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';
import type { TestUser } from './fixtures.js';
import type { Checkout, ClientBalance, LedgerEntry, OwnerBalance } from './answers.js';
import { startTestServer, type TestServer } from './server.js';
import { client } from './http.js';
import {
  deliverWebhook,
  signatureFor,
  startFakeStripe,
  stripeEvent,
  stripeEnv,
  type FakeStripe,
} from './fake-stripe.js';

// The Stripe test files' common world: a server wired to its own local fake of the processor (CONTRACT
// §8, STRIPE_API_BASE), started before the file's tests and closed after, and webhooks signed with the
// file's secret as Stripe signs them.

export interface StripeWorld {
  fake: FakeStripe;
  server: TestServer;
  api: ReturnType<typeof client>;
}

/** A processor id of Stripe's shape (`evt_…`, `pi_…`, `du_…`) that no other test uses. */
export const rid = (prefix: string) => `${prefix}_${randomBytes(8).toString('hex')}`;

/** Checkout URLs any test can pass (the processor only echoes them back). */
export const checkoutUrls = {
  success_url: 'https://app.example/ok',
  cancel_url: 'https://app.example/cancel',
};

/** Registers the file's hooks; `world` is filled in before the first test runs. */
export function useStripeServer(secret: string) {
  const world = {} as StripeWorld;
  beforeAll(async () => {
    world.fake = await startFakeStripe();
    world.server = await startTestServer({ env: stripeEnv(world.fake, secret) });
    world.api = client(world.server.url);
  });
  afterAll(async () => {
    await world.server?.close();
    await world.fake?.close();
  });
  /** Delivers a signed event to the server's webhook. */
  const send = (
    type: string,
    object: Record<string, unknown>,
    opts: { id?: string; created?: number } = {},
  ) => {
    const payload = stripeEvent(type, object, opts);
    return deliverWebhook(world.server.url, payload, signatureFor(payload, secret));
  };

  // What the event tests (refunds, disputes) read back after a delivery, over the API and the outcome
  // the webhook recorded.
  const get = <T>(u: TestUser, path: string) => world.api.get<T>(path, { token: u.session });
  /** The user's default client: balance and allocation. */
  const balance = async (u: TestUser) =>
    (await get<ClientBalance>(u, `/v1/clients/${u.clientId}/credits/balance`)).body;
  /** The owner's unallocated pool. */
  const pool = async (u: TestUser) =>
    (await get<OwnerBalance>(u, '/v1/owner/balance')).body.unallocated_credits;
  /** The default client's ledger, newest first. */
  const transactions = async (u: TestUser) =>
    (await get<LedgerEntry[]>(u, `/v1/clients/${u.clientId}/credits/transactions`)).body;
  /** The outcome the webhook recorded for event `eventId`. */
  const outcome = async (eventId: string) =>
    (
      await queryRows<{ outcome: string }>(
        world.server.deps.db,
        sql`select outcome from billing_webhook_events where id = ${eventId}`,
      )
    )[0]?.outcome;
  /**
   * A top-up checkout opened through the API (the stripe SDK against the fake) and paid by a new payment
   * intent `pi`: its completion event object, and `grant()` to deliver it.
   */
  const topup = async (u: TestUser, cents: number) => {
    const res = await world.api.post<Checkout>(
      `/v1/clients/${u.clientId}/credits/topup`,
      { amount_usd: cents, ...checkoutUrls },
      { token: u.session },
    );
    expect(res.status).toBe(200);
    const s = world.fake.sessions.get(res.body.session_id)!;
    const pi = rid('pi');
    const completed: Record<string, unknown> = {
      ...s,
      status: 'complete',
      payment_status: 'paid',
      payment_intent: pi,
    };
    return { pi, completed, grant: () => send('checkout.session.completed', completed) };
  };
  return { world, send, balance, pool, transactions, outcome, topup };
}
