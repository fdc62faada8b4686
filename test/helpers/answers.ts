import type { KeyItem } from '../../src/cli/commands/keys.js';
import type { z } from 'zod';
import type { client, user } from '../../src/openapi/accounts.js';

// Named shapes of the service's JSON answers that tests read field by field, for the typed generic of
// helpers/http.ts (`api.get<Page<ClientRow>>(…)`). Where src/openapi exports the response schema the
// type is inferred from it; the rest copy the schema of the route in src/openapi (named beside each) —
// test/openapi/openapi-responses.test.ts checks real answers against those schemas.

/** A list answer (`{ data: [...] }`, pagination fields aside). */
export interface Page<T> {
  data: T[];
}

export type UserRow = z.infer<typeof user>;
/** One entry of GET /v1/clients. */
export type ClientRow = z.infer<typeof client>;

/** POST /v1/clients (src/openapi/accounts.ts). */
export interface CreatedClient {
  id: string;
  name: string;
  owner_id: string;
  created_at: number;
}

/** POST /v1/auth/device/code (src/openapi/accounts.ts; RFC 8628 §3.2). */
export interface DeviceCode {
  device_code: string;
  user_code: string;
  verification_uri: string;
  verification_uri_complete: string;
  expires_in: number;
  interval: number;
}

/** POST /v1/auth/device/poll: one of complete, authorization_pending, slow_down (flattened). */
export interface DevicePoll {
  status: string;
  token?: string;
  client_id?: string;
  email?: string;
  interval?: number;
}

/** One message of GET /dev/mail (src/openapi/service.ts). */
export interface DevMail {
  to: string;
  subject: string;
  text: string;
  html: string;
  created_at: number;
}

/** GET /v1/owner/balance, and PUT /v1/owner/orgs/{id}/allocation (src/openapi/billing.ts). */
export interface OwnerBalance {
  owner_id: string;
  global_credits: number;
  unallocated_credits: number;
  lifetime_granted_credits: number;
  debt_credits: number;
  allocations: { org_id: string; name: string; is_default: boolean; allocated_credits: number }[];
}

/** GET /v1/clients/{id}/credits/balance (src/openapi/billing.ts). */
export interface ClientBalance {
  org_id: string;
  balance_credits: number;
  allocation_credits: number;
}

/** One entry of GET /v1/clients/{id}/credits/transactions (src/openapi/billing.ts). */
export interface LedgerEntry {
  id: number;
  org_id: string;
  amount_credits: number;
  transaction_type: string;
  balance_after_credits: number;
  description: string;
  created_at: number;
}

/** GET /v1/clients/{id}/subscription (src/openapi/billing.ts). */
export interface Subscription {
  org_id: string;
  plan_name: string;
  status: string;
  current_period_start: number;
  current_period_end: number;
  cancel_at_period_end: boolean;
  payment_subscription_id: string;
}

/** One entry of GET /v1/clients/{id}/invoices (src/openapi/billing.ts). */
export interface Invoice {
  id: string;
  org_id: string;
  amount_due_cents: number;
  amount_paid_cents: number;
  status: string;
  currency: string;
  invoice_pdf: string;
  created_at: number;
  due_date: number;
  payment_failed?: true;
}

/** One entry of GET /v1/clients/{id}/payment-methods (src/openapi/billing.ts). */
export interface PaymentMethod {
  id: string;
  type: string;
  brand: string;
  last4: string;
  exp_month: number;
  exp_year: number;
  is_default: boolean;
  org_id: string;
}

/** POST …/subscription/checkout and …/credits/topup (src/openapi/billing.ts). */
export interface Checkout {
  session_id: string;
  checkout_url: string;
}

/** POST /v1/register (src/openapi/accounts.ts). */
export interface Registered {
  user: UserRow;
  client: ClientRow & { owner_id: string };
  message: string;
}

/** POST /v1/login and POST /v1/2fa/login: a session, or (login only) the 2FA challenge (flattened). */
export interface SignedIn {
  user: UserRow;
  message: string;
  session_token: string;
  requires_2fa?: true;
  challenge_token?: string;
  email?: string;
}

/** One entry of GET /v1/clients/{id}/members, and POST …/members (src/openapi/accounts.ts). */
export interface MemberRow {
  user_id: string;
  email: string;
  name: string;
  role: 'owner' | 'member' | 'viewer';
  created_at: number;
}

/** POST /v1/tokens (src/openapi/accounts.ts). */
export interface MintedToken {
  id: number;
  client_id: string;
  token_name: string;
  token: string;
  created_at: number;
  expires_at: number | null;
  scopes: string[];
}

/** One entry of GET /v1/tokens (src/openapi/accounts.ts); the terminal client reads the same. */
export type TokenRow = KeyItem;

/** GET /v1/auth/verify (src/openapi/accounts.ts). */
export interface Verified {
  valid: true;
  client_id: string;
  user_id: string | null;
  email: string | null;
  token_id: number;
  token_name: string;
  principal: { type: 'user' | 'service_account'; id: string };
  scopes: string[];
  expires_at: number | null;
  last_used_at: number | null;
  spend: { today: number; week: number; month: number };
  budget: { budget_credits: number; period: string; spent_credits: number; remaining_credits: number } | null;
}

/** GET /v1/2fa/status (src/openapi/accounts.ts). */
export interface TwoFactorStatus {
  enabled: boolean;
  recovery_codes_remaining: number;
}

/** POST /v1/2fa/setup (src/openapi/accounts.ts). */
export interface TwoFactorSetup {
  secret: string;
  otpauth_uri: string;
}

/** POST /v1/2fa/enable (src/openapi/accounts.ts). */
export interface TwoFactorEnabled {
  enabled: true;
  recovery_codes: string[];
}

/** POST /v1/email/verify/resend (src/openapi/accounts.ts). */
export interface VerifyResent {
  sent: boolean;
  message: string;
}

/** One invitation: POST /v1/clients/{id}/invitations, DELETE …/{inv}, and GET's list (src/openapi/people.ts). */
export interface InvitationRow {
  id: string;
  client_id: string;
  email: string;
  role: 'member' | 'viewer';
  status: 'pending' | 'accepted' | 'revoked' | 'expired';
  created_at: number;
  expires_at: number;
  accepted_at: number | null;
  revoked_at: number | null;
}

/** POST /v1/invitations/accept (src/openapi/people.ts). */
export interface InvitationAccepted {
  client: { id: string; name: string; role: 'member' | 'viewer' };
}

/** Totals of usage (src/openapi/usage.ts). */
export interface UsageTotals {
  calls: number;
  prompt_tokens: number;
  completion_tokens: number;
  cached_prompt_tokens: number;
  credits_debited: number;
  cost_cents: string;
}

/** GET /v1/clients/{id}/usage (JSON; src/openapi/usage.ts). */
export interface UsageSummary {
  client_id: string;
  from: number;
  to: number;
  group_by: string;
  data: (UsageTotals & { key: string; label: string })[];
  totals: UsageTotals;
}

/** One call of GET /v1/clients/{id}/usage/calls (the schema `UsageCall` of src/openapi/usage.ts). */
export interface UsageCall {
  id: string;
  created_at: number;
  user_id: string;
  email: string | null;
  credential:
    | { type: 'api_token'; token_id: number; token_name: string | null }
    | { type: 'oauth_grant'; grant_id: string; client_id: string | null; client_name: string | null };
  source: string;
  run_id: string | null;
  model: string;
  prompt_tokens: number;
  completion_tokens: number;
  cached_prompt_tokens: number;
  cost_cents: string;
  credits_debited: number;
  duration_ms: number;
  outcome: string;
}

/** GET /v1/clients/{id}/usage/calls (JSON; src/openapi/usage.ts). */
export interface UsageCalls {
  client_id: string;
  from: number;
  to: number;
  data: UsageCall[];
}
