import type Stripe from 'stripe';
import { errorOf } from '../http/errors.js';
import { BILLING_ERRORS } from './errors.js';

// The signature of POST /v1/webhooks/stripe (CONTRACT §8), checked over the exact request bytes before
// anything else reads the event (webhooks.ts).

/** Seconds a signed timestamp may be old (Stripe's default tolerance). */
export const SIGNATURE_TOLERANCE_SECONDS = 300;

/** Verifies the `stripe-signature` header over the raw body; 400 on a bad or stale signature. */
export function verifyEvent(
  verifier: Stripe,
  rawBody: Buffer | undefined,
  signature: string | undefined,
  secret: string,
): Stripe.Event {
  if (!rawBody || !signature)
    throw errorOf(BILLING_ERRORS, 'INVALID_SIGNATURE', 'missing body or stripe-signature header');
  try {
    const event = verifier.webhooks.constructEvent(rawBody, signature, secret, SIGNATURE_TOLERANCE_SECONDS);
    // The SDK refuses only timestamps too old; one too far ahead is refused alike (CONTRACT §8), else a
    // signature made for a future moment could be replayed until that moment is 5 minutes past.
    if (signedAt(signature) > Date.now() / 1000 + SIGNATURE_TOLERANCE_SECONDS) throw new Error('future');
    return event;
  } catch {
    throw errorOf(BILLING_ERRORS, 'INVALID_SIGNATURE');
  }
}

/** The `t=` of a `stripe-signature` header (seconds); NaN when absent, which constructEvent refuses first. */
function signedAt(signature: string): number {
  const t = signature.split(',').find((part) => part.trim().startsWith('t='));
  return t ? Number(t.trim().slice(2)) : Number.NaN;
}
