// The payment processor seen by billing (STYLE: "payments go to the dev processor unless Stripe is
// configured"; each default is a small module with the same interface as the real one).

export interface CheckoutInput {
  orgKey: string;
  customerId: string;
  kind: 'topup' | 'subscription';
  /** Top-ups: the price in cents (amount_usd). */
  amountCents: number;
  /** Top-ups: the tokens granted at par. */
  credits: number;
  /** Subscriptions: the processor's price (STRIPE_PRICE_PRO). */
  priceId: string;
  successUrl: string;
  cancelUrl: string;
}

export interface PaymentMethodView {
  id: string;
  type: string;
  brand: string;
  last4: string;
  exp_month: number;
  exp_year: number;
  is_default: boolean;
}

/** An off-session charge of a customer's saved card (auto top-up). */
export interface OffSessionCharge {
  customerId: string;
  amountCents: number;
  /** Derived from the organization and the balance crossing: a retry returns the same PaymentIntent. */
  idempotencyKey: string;
  metadata: Record<string, string>;
}

/**
 * What the processor answered: `succeeded` and `processing` await the webhook (the grant comes only from
 * payment_intent.succeeded); `failed`: declined, or no saved card (`id` null when no intent was made).
 */
export interface OffSessionResult {
  id: string | null;
  status: 'succeeded' | 'processing' | 'failed';
  failure?: string;
}

export interface PaymentProcessor {
  readonly kind: 'stripe' | 'dev';
  createCustomer(input: { orgKey: string; email: string | undefined }): Promise<string>;
  createCheckoutSession(input: CheckoutInput): Promise<{ id: string; url: string }>;
  /**
   * Closes an open checkout session so that it can no longer be paid. 'expired': closed now or before;
   * 'complete': it was paid (its webhooks may still be on their way).
   */
  expireCheckoutSession(sessionId: string): Promise<'expired' | 'complete'>;
  createPortalSession(input: { customerId: string; returnUrl: string }): Promise<string>;
  listPaymentMethods(customerId: string): Promise<PaymentMethodView[]>;
  /** A PaymentIntent confirmed off-session on the customer's default card (Stripe: confirm + off_session). */
  chargeOffSession(input: OffSessionCharge): Promise<OffSessionResult>;
}
