import { z } from 'zod';
import { allocationBody, checkoutBody, portalBody, topupBody } from '../billing/routes.js';
import { pageQuery } from '../http/pagination.js';
import { route } from './describe.js';

// Billing in credits (tokens) with an exact ledger (CONTRACT §8), and the processor's webhook.

const clientId = z.string().meta({ example: 'client_k3j9x2' });
const clientParams = z.object({ client_id: clientId });
const both = ['session', 'token'] as const;

const ownerBalance = z
  .object({
    owner_id: z.string(),
    global_credits: z.number().int(),
    unallocated_credits: z.number().int(),
    lifetime_granted_credits: z.number().int(),
    debt_credits: z.number().int().min(0).meta({
      description:
        "Tokens the owner owes (a refund or lost dispute of tokens already spent, usage beyond a call's hold): every later grant pays it first; while above 0 no allocation can be raised",
    }),
    allocations: z.array(
      z.object({
        org_id: clientId,
        name: z.string(),
        is_default: z.boolean(),
        allocated_credits: z.number().int(),
      }),
    ),
  })
  .meta({ id: 'OwnerBalance' });

const checkout = z.object({ session_id: z.string(), checkout_url: z.string() }).meta({ id: 'Checkout' });

export const billingRoutes = [
  route('get', '/v1/owner/balance', {
    summary: "The owner's pool and what each of their clients holds",
    auth: [...both, 'accountGrant'],
    response: ownerBalance,
  }),
  route('put', '/v1/owner/orgs/:org_id/allocation', {
    summary: "Set a client's balance from the owner's pool (owner)",
    auth: [...both],
    params: z.object({ org_id: clientId }),
    body: allocationBody,
    response: ownerBalance,
    errors: [402, 403, 409],
  }),
  route('get', '/v1/clients/:client_id/credits/balance', {
    summary: "A client's balance",
    auth: [...both, 'accountGrant'],
    params: clientParams,
    response: z.object({
      org_id: clientId,
      balance_credits: z.number().int(),
      allocation_credits: z.number().int(),
    }),
    errors: [403],
  }),
  route('get', '/v1/clients/:client_id/credits/transactions', {
    summary: "A client's ledger entries, newest first",
    auth: [...both, 'accountGrant'],
    params: clientParams,
    query: pageQuery,
    response: z.array(
      z.object({
        id: z.number().int(),
        org_id: clientId,
        amount_credits: z.number().int(),
        transaction_type: z.string(),
        balance_after_credits: z.number().int(),
        description: z.string(),
        created_at: z.number().int(),
      }),
    ),
    errors: [403],
  }),
  route('get', '/v1/clients/:client_id/subscription', {
    summary: "A client's active subscription (404 subscription_not_found when none)",
    auth: [...both, 'accountGrant'],
    params: clientParams,
    response: z.object({
      org_id: clientId,
      plan_name: z.string(),
      status: z.string(),
      current_period_start: z.number().int(),
      current_period_end: z.number().int(),
      cancel_at_period_end: z.boolean(),
      payment_subscription_id: z.string(),
    }),
    errors: [403, 404],
  }),
  route('get', '/v1/clients/:client_id/invoices', {
    summary: "A client's invoices",
    auth: [...both, 'accountGrant'],
    params: clientParams,
    query: pageQuery,
    response: z.array(
      z.object({
        id: z.string(),
        org_id: clientId,
        amount_due_cents: z.number().int(),
        amount_paid_cents: z.number().int(),
        status: z.string(),
        currency: z.string(),
        invoice_pdf: z.string(),
        created_at: z.number().int(),
        due_date: z.number().int(),
        payment_failed: z.literal(true).optional(),
      }),
    ),
    errors: [403],
  }),
  route('get', '/v1/clients/:client_id/payment-methods', {
    summary: "A client's saved payment methods",
    auth: [...both, 'accountGrant'],
    params: clientParams,
    response: z.array(
      z.object({
        id: z.string(),
        type: z.string(),
        brand: z.string(),
        last4: z.string(),
        exp_month: z.number().int(),
        exp_year: z.number().int(),
        is_default: z.boolean(),
        org_id: clientId,
      }),
    ),
    errors: [403],
  }),
  route('post', '/v1/clients/:client_id/subscription/checkout', {
    summary: 'Start a checkout for the Pro plan (owner)',
    auth: [...both],
    params: clientParams,
    body: checkoutBody,
    response: checkout,
    errors: [403, 409, 503],
  }),
  route('post', '/v1/clients/:client_id/credits/topup', {
    summary: 'Start a checkout for a one-time top-up (owner; amount_usd in cents)',
    auth: [...both],
    params: clientParams,
    body: topupBody,
    response: checkout,
    errors: [403, 503],
  }),
  route('post', '/v1/clients/:client_id/billing/portal', {
    summary: "Open the processor's billing portal (owner)",
    auth: [...both],
    params: clientParams,
    body: portalBody,
    response: z.object({ portal_url: z.string() }),
    errors: [403, 404, 503],
  }),
  route('post', '/v1/webhooks/stripe', {
    summary: "Stripe's webhook: the Stripe-Signature over the raw body is its authentication",
    headers: z.object({ 'stripe-signature': z.string() }),
    body: z.looseObject({ id: z.string(), type: z.string() }).meta({ description: 'A Stripe event' }),
    response: z.object({ received: z.literal(true), duplicate: z.boolean() }),
    errors: [503],
  }),
];
