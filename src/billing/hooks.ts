import { createHmac } from 'node:crypto';
import Stripe from 'stripe';
import type { Config } from '../config.js';
import type { Db } from '../db/client.js';
import type { Keys } from '../crypto/server-secrets.js';
import type { Logger } from '../log.js';
import { expireStaleHolds } from './spend.js';
import type { PaymentProcessor } from './processor.js';
import { createStripeClient, createStripeProcessor } from './stripe-processor.js';
import { createDevProcessor } from './dev-processor.js';
import type { LiveCalls } from './live-calls.js';

export { grantTrial } from './service.js';
export { reclaimDeletedOrg } from './deleted-client.js';
export { announceDeletedOrg, createLiveCalls } from './live-calls.js';

/** How often the sweep releases holds left by crashed processes (reserve also releases them per org). */
export const HOLD_SWEEP_INTERVAL_MS = 60_000;

export interface BillingParts {
  config: Config;
  db: Db;
  keys: Keys;
  log: Logger;
  /** This process's calls and runs in flight per client, ended when the client is deleted (live-calls.ts). */
  liveCalls: LiveCalls;
  onClose(fn: () => Promise<void> | void): void;
}

export interface Billing {
  /** Stripe when STRIPE_SECRET_KEY is set; the dev processor in DEV_MODE; otherwise none (503). */
  processor: PaymentProcessor | null;
  /** The SDK client (Stripe mode), used by reconciliation to re-fetch paid objects. */
  stripe: Stripe | null;
  /** Checks webhook signatures (the SDK's verifier works without an API key). */
  verifier: Stripe;
  /** STRIPE_WEBHOOK_SECRET, or in dev mode a secret derived from the server key (the dev processor signs with it). */
  webhookSecret: string | undefined;
  /** STRIPE_PRICE_PRO: the only price whose paid invoices grant a Pro period (CONTRACT §8). */
  proPriceId: string;
  /** This process's calls and runs in flight per client, ended when the client is deleted (live-calls.ts). */
  liveCalls: LiveCalls;
}

/**
 * Billing's part of the composition root (src/deps.ts): the processor, the webhook secret, and the
 * stale-hold sweep that runs until deps.close(). The trial and the reclaim of a deleted client run as
 * deps.hooks inside those events' transactions (CONTRACT §5, §8).
 */
export function createBilling(parts: BillingParts): Billing {
  const { config } = parts;
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    expireStaleHolds(parts.db)
      .then((released) => {
        if (released > 0) parts.log.info({ released }, 'released expired credit holds');
      })
      .catch((err: unknown) => parts.log.warn({ err }, 'hold sweep failed'))
      .finally(() => {
        running = false;
      });
  }, HOLD_SWEEP_INTERVAL_MS);
  timer.unref();
  parts.onClose(() => clearInterval(timer));
  parts.onClose(() => parts.liveCalls.close());

  const stripe = config.stripe.secretKey
    ? createStripeClient(config.stripe.secretKey, config.stripe.apiBase)
    : null;
  const dev = !stripe && config.devMode;
  const devSecret = `whsec_dev_${createHmac('sha256', parts.keys.hmac).update('dev stripe webhook').digest('base64url')}`;
  return {
    processor: stripe
      ? createStripeProcessor(stripe)
      : dev
        ? createDevProcessor(parts.db, config.v2Url)
        : null,
    stripe,
    verifier: stripe ?? new Stripe('sk_unused_for_webhook_verification'),
    webhookSecret: config.stripe.webhookSecret ?? (dev ? devSecret : undefined),
    proPriceId: config.stripe.pricePro,
    liveCalls: parts.liveCalls,
  };
}
