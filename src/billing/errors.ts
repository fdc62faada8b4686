import type { ErrorCatalogue } from '../http/errors.js';

// The billing domain's error codes (STYLE: Errors; decision records 0086, 0120 and 0110): allocations,
// spending, payments, the processor's webhook and the dev processor's pages, beside the common ones
// (src/http/errors.ts: NOT_FOUND, NO_ACCESS, VALIDATION_ERROR). The /v1 billing routes answer them as
// {detail: {code, message}}; the spending codes reach callers only on the model routes and run frames,
// which lower-case every code (CONTRACT §3), so MEMBER_BUDGET_EXHAUSTED is member_budget_exhausted there.

const ERRORS_TABLE = 'interface document: Errors; CONTRACT §3';

export const BILLING_ERRORS = {
  UNKNOWN_PRICE: { status: 400, message: "price_id must be the Pro plan's price" },
  INVALID_SIGNATURE: { status: 400, message: 'webhook signature verification failed' },
  INVALID_EVENT: { status: 400, message: 'the event contains a NUL character and cannot be stored' },
  NOT_REFUNDABLE: { status: 400, message: 'this invoice has no payment left to refund' },
  REFUND_TOO_LARGE: { status: 400, message: 'the refund is larger than what is left of the payment' },
  NOT_DISPUTABLE: { status: 400, message: 'this invoice has no payment left to dispute' },
  DISPUTE_TOO_LARGE: { status: 400, message: 'the dispute is larger than what is left of the payment' },
  INSUFFICIENT_UNALLOCATED: { status: 402, message: 'the raise exceeds the unallocated pool' },
  insufficient_credits: {
    status: 402,
    message: "the organization's token allocation cannot cover this call",
    spelledBy: ERRORS_TABLE,
  },
  MEMBER_BUDGET_EXHAUSTED: { status: 402, message: "this member's token budget for the period is used up" },
  payment_failed: { status: 402, message: 'the payment was declined', spelledBy: ERRORS_TABLE },
  CLIENT_DELETED: {
    status: 403,
    message: 'the client was deleted; its calls and runs in flight were ended',
  },
  subscription_not_found: {
    status: 404,
    message: 'this client has no active subscription',
    spelledBy: ERRORS_TABLE,
  },
  HOLD_NOT_FOUND: { status: 404, message: 'no credits are held for this request' },
  ALREADY_SUBSCRIBED: { status: 409, message: 'this client already has an active Pro subscription' },
  OWNER_IN_DEBT: {
    status: 409,
    message:
      "the owner's debt must be paid (by a top-up or subscription period) before an allocation can be raised",
  },
  CREDITS_IN_USE: {
    status: 409,
    message: 'tokens held by calls in flight cannot be reclaimed yet; try again shortly',
  },
  DUPLICATE_REQUEST: { status: 409, message: 'this request id already holds credits' },
  PROCESSOR_UNAVAILABLE: { status: 502, message: 'the payment processor could not be reached; try again' },
  PAYMENTS_NOT_CONFIGURED: {
    status: 503,
    message: 'payments are not configured on this server (set STRIPE_SECRET_KEY)',
  },
  WEBHOOK_NOT_CONFIGURED: { status: 503, message: 'STRIPE_WEBHOOK_SECRET is not set' },
} as const satisfies ErrorCatalogue;
