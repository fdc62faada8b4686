import Stripe from 'stripe';
import { errorOf, notFound, type AppError } from '../http/errors.js';
import { BILLING_ERRORS } from './errors.js';
import type { CheckoutInput, OffSessionResult, PaymentMethodView, PaymentProcessor } from './processor.js';

// Stripe through its SDK (pinned API version of stripe 23: 2026-10-28). STRIPE_API_BASE is the API's
// origin, used as the SDK's host, port and protocol (CONTRACT §8), so tests point it at a local fake.

export function createStripeClient(secretKey: string, apiBase: string | undefined): Stripe {
  const config: ConstructorParameters<typeof Stripe>[1] = { maxNetworkRetries: 2, timeout: 20_000 };
  if (apiBase) {
    const url = new URL(apiBase);
    config.host = url.hostname;
    config.port = url.port || (url.protocol === 'https:' ? 443 : 80);
    config.protocol = url.protocol === 'https:' ? 'https' : 'http';
  }
  return new Stripe(secretKey, config);
}

/** A processor error: card problems are the caller's 402 `payment_failed`; the rest is our 502. */
export function processorError(err: unknown): AppError {
  if (err instanceof Stripe.errors.StripeCardError) {
    return errorOf(BILLING_ERRORS, 'payment_failed', err.message || undefined);
  }
  if (err instanceof Stripe.errors.StripeInvalidRequestError && err.code === 'resource_missing') {
    return notFound('the processor does not know this object');
  }
  return errorOf(BILLING_ERRORS, 'PROCESSOR_UNAVAILABLE');
}

async function call<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw processorError(err);
  }
}

export function createStripeProcessor(stripe: Stripe): PaymentProcessor {
  const processor: PaymentProcessor = {
    kind: 'stripe',
    async createCustomer({ orgKey, email }) {
      // The idempotency key makes two racing first checkouts of one client create one customer.
      const customer = await call(() =>
        stripe.customers.create(
          { email, metadata: { org_key: orgKey } },
          { idempotencyKey: `customer:${orgKey}` },
        ),
      );
      return customer.id;
    },
    async createCheckoutSession(input: CheckoutInput) {
      const metadata = { org_key: input.orgKey, kind: input.kind, credits: String(input.credits) };
      const session = await call(() =>
        input.kind === 'subscription'
          ? stripe.checkout.sessions.create({
              mode: 'subscription',
              customer: input.customerId,
              client_reference_id: input.orgKey,
              line_items: [{ price: input.priceId, quantity: 1 }],
              success_url: input.successUrl,
              cancel_url: input.cancelUrl,
              metadata,
              subscription_data: { metadata: { org_key: input.orgKey } },
            })
          : stripe.checkout.sessions.create({
              mode: 'payment',
              customer: input.customerId,
              client_reference_id: input.orgKey,
              line_items: [
                {
                  quantity: 1,
                  price_data: {
                    currency: 'usd',
                    unit_amount: input.amountCents,
                    product_data: { name: `${input.credits.toLocaleString('en-US')} svc tokens` },
                  },
                },
              ],
              // A paid top-up gets an invoice too: "Invoices are money actually paid".
              invoice_creation: { enabled: true, invoice_data: { metadata: { org_key: input.orgKey } } },
              success_url: input.successUrl,
              cancel_url: input.cancelUrl,
              metadata,
            }),
      );
      if (!session.url)
        throw errorOf(BILLING_ERRORS, 'PROCESSOR_UNAVAILABLE', 'the processor returned no checkout URL');
      return { id: session.id, url: session.url };
    },
    async expireCheckoutSession(sessionId) {
      try {
        await stripe.checkout.sessions.expire(sessionId);
        return 'expired';
      } catch (err) {
        if (!(err instanceof Stripe.errors.StripeInvalidRequestError)) throw processorError(err);
        // A session Stripe does not know (another account or mode) cannot be paid either.
        if (err.code === 'resource_missing') return 'expired';
        // Stripe expires only open sessions: one that is not open was paid or has expired already.
      }
      const session = await call(() => stripe.checkout.sessions.retrieve(sessionId));
      return session.status === 'complete' ? 'complete' : 'expired';
    },
    async createPortalSession({ customerId, returnUrl }) {
      const portal = await call(() =>
        stripe.billingPortal.sessions.create({ customer: customerId, return_url: returnUrl }),
      );
      return portal.url;
    },
    async chargeOffSession({ customerId, amountCents, idempotencyKey, metadata }): Promise<OffSessionResult> {
      const methods = await processor.listPaymentMethods(customerId);
      const card = methods.find((m) => m.is_default) ?? methods[0];
      if (!card) return { id: null, status: 'failed', failure: 'no saved payment method' };
      try {
        const intent = await stripe.paymentIntents.create(
          {
            amount: amountCents,
            currency: 'usd',
            customer: customerId,
            payment_method: card.id,
            confirm: true,
            off_session: true,
            metadata,
          },
          { idempotencyKey },
        );
        if (intent.status === 'succeeded') return { id: intent.id, status: 'succeeded' };
        if (intent.status === 'processing') return { id: intent.id, status: 'processing' };
        // requires_action (authentication needed) and the like: the owner is not there to act.
        return { id: intent.id, status: 'failed', failure: `payment ${intent.status.replace(/_/g, ' ')}` };
      } catch (err) {
        if (err instanceof Stripe.errors.StripeCardError)
          return {
            id: err.payment_intent?.id ?? null,
            status: 'failed',
            failure: err.message || 'the card was declined',
          };
        throw processorError(err);
      }
    },
    async listPaymentMethods(customerId): Promise<PaymentMethodView[]> {
      const [customer, methods] = await call(() =>
        Promise.all([
          stripe.customers.retrieve(customerId),
          stripe.customers.listPaymentMethods(customerId, { limit: 100 }),
        ]),
      );
      const defaultPm =
        'deleted' in customer && customer.deleted
          ? null
          : ((customer as Stripe.Customer).invoice_settings?.default_payment_method ?? null);
      const defaultId = typeof defaultPm === 'string' ? defaultPm : (defaultPm?.id ?? null);
      return methods.data.map((pm) => ({
        id: pm.id,
        type: pm.type,
        brand: pm.card?.brand ?? pm.type,
        last4: pm.card?.last4 ?? '',
        exp_month: pm.card?.exp_month ?? 0,
        exp_year: pm.card?.exp_year ?? 0,
        is_default: pm.id === defaultId,
      }));
    },
  };
  return processor;
}
