import { afterAll, beforeAll } from 'vitest';
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
  return { world, send };
}
