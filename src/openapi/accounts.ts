import { z } from 'zod';
import {
  codeBody,
  deleteAccountBody,
  loginBody,
  registerBody,
  resetConfirmBody,
  resetRequestBody,
  tokenBody,
  twoFactorLoginBody,
} from '../accounts/routes.js';
import { addMemberBody, createBody as createClientBody } from '../orgs/routes.js';
import { mintBody, revokeBody, TOKEN_SCOPES } from '../tokens/schema.js';
import { authorizeBody, denyBody, pollBody } from '../device/routes.js';
import { pageQuery } from '../http/pagination.js';
import { detailError, route } from './describe.js';

// Accounts, clients (organizations), API tokens and the device flow (CONTRACT §4–§6).

const unixTime = z.number().int().meta({ description: 'Unix time, seconds' });
const clientId = z
  .string()
  .meta({ description: 'An organization id, client_… (CONTRACT §2)', example: 'client_k3j9x2' });
const message = z.string();

export const user = z
  .object({
    id: z.string(),
    email: z.string(),
    name: z.string(),
    email_verified: z.boolean(),
    two_factor_enabled: z.boolean(),
    created_at: unixTime,
  })
  .meta({ id: 'User' });

const session = z.object({ user, message, session_token: z.string() }).meta({ id: 'SignedIn' });
const challenge = z
  .object({ requires_2fa: z.literal(true), challenge_token: z.string(), email: z.string(), message })
  .meta({ id: 'TwoFactorChallenge' });

export const client = z
  .object({
    id: clientId,
    name: z.string(),
    role: z.enum(['owner', 'member', 'viewer']),
    created_at: unixTime,
  })
  .meta({ id: 'Client' });
const member = z
  .object({
    user_id: z.string(),
    email: z.string(),
    name: z.string(),
    role: z.enum(['owner', 'member', 'viewer']),
    created_at: unixTime,
  })
  .meta({ id: 'Member' });
export const tokenScopes = z.array(z.enum(TOKEN_SCOPES)).meta({
  description: 'What the credential reaches: model routes, account routes (CONTRACT §6)',
});
const token = z
  .object({
    id: z.number().int(),
    client_id: clientId,
    token_name: z.string(),
    token_prefix: z.string(),
    created_at: unixTime,
    last_used_at: unixTime.nullable(),
    revoked_at: unixTime.nullable(),
    expires_at: unixTime.nullable(),
    scopes: tokenScopes,
  })
  .meta({ id: 'ApiToken' });
const clientParams = z.object({ client_id: clientId });
const both = ['session', 'token'] as const;

export const accountRoutes = [
  route('post', '/v1/register', {
    summary: 'Create an account and its default client',
    body: registerBody,
    response: z.object({
      user,
      client: client.extend({ owner_id: z.string() }),
      message,
    }),
    errors: [409, 429],
  }),
  route('post', '/v1/email/verify', {
    summary: 'Verify an e-mail address with the token from the mail',
    body: tokenBody,
    response: z.object({ verified: z.literal(true) }),
    errors: [429],
  }),
  route('post', '/v1/email/verify/resend', {
    summary: 'Send a new verification mail',
    auth: ['session'],
    response: z.object({ sent: z.boolean(), message }),
    errors: [429],
  }),
  route('post', '/v1/login', {
    summary: 'Sign in with e-mail and password',
    description: 'Sets the session cookie; with 2FA on, answers a challenge for POST /v1/2fa/login instead.',
    body: loginBody,
    response: z.union([session, challenge]),
    errors: [403, 429],
  }),
  route('post', '/v1/2fa/login', {
    summary: 'Complete a sign-in with a TOTP or recovery code',
    body: twoFactorLoginBody,
    response: session,
    errors: [403, 429],
  }),
  route('post', '/v1/logout', {
    summary: 'Sign out (revokes the session)',
    auth: ['session'],
    response: z.object({ message }),
  }),
  route('get', '/v1/2fa/status', {
    summary: 'Whether two-factor sign-in is on',
    auth: ['session'],
    response: z.object({ enabled: z.boolean(), recovery_codes_remaining: z.number().int() }),
  }),
  route('post', '/v1/2fa/setup', {
    summary: 'Start two-factor enrolment (a new TOTP secret)',
    auth: ['session'],
    response: z.object({ secret: z.string(), otpauth_uri: z.string() }),
    errors: [409],
  }),
  route('post', '/v1/2fa/enable', {
    summary: 'Confirm enrolment with a code; answers the recovery codes once',
    auth: ['session'],
    body: codeBody,
    response: z.object({ enabled: z.literal(true), recovery_codes: z.array(z.string()) }),
  }),
  route('post', '/v1/2fa/disable', {
    summary: 'Turn two-factor sign-in off',
    auth: ['session'],
    body: codeBody,
    response: z.object({ enabled: z.literal(false) }),
  }),
  route('post', '/v1/password/reset/request', {
    summary: 'Mail a password-reset link (the same answer whether or not the address is known)',
    body: resetRequestBody,
    response: z.object({ message }),
    errors: [429],
  }),
  route('post', '/v1/password/reset/confirm', {
    summary:
      'Set a new password with the reset token; revokes every session and OAuth grant (svc_ tokens stay and are counted)',
    body: resetConfirmBody,
    response: z.object({
      message,
      revoked: z.object({ sessions: z.number().int(), oauth_grants: z.number().int() }),
      api_tokens: z.object({ active: z.number().int(), message }),
    }),
    errors: [429],
  }),
  route('post', '/v1/account/delete', {
    summary: "Delete the caller's account (password, and the 2FA code when on, asked again)",
    description:
      'Refused with 409 ACCOUNT_DELETION_BLOCKED (detail.blockers lists why) while the caller owns an organization with other members, owes tokens, or has a Pro subscription that renews. Otherwise every owned organization is deleted, unspent tokens are forfeited, every session, OAuth grant and svc_ token is revoked and the account is anonymised; the ledger keeps its rows (docs/accounts.md).',
    auth: ['session'],
    body: deleteAccountBody,
    response: z.object({
      deleted: z.literal(true),
      deleted_clients: z.number().int(),
      forfeited_credits: z.number().int(),
      revoked: z.object({
        sessions: z.number().int(),
        oauth_grants: z.number().int(),
        api_tokens: z.number().int(),
      }),
      message,
    }),
    errors: [409, 429],
  }),

  route('get', '/v1/clients', {
    summary: "The caller's clients (default first)",
    auth: [...both, 'accountGrant'],
    query: pageQuery,
    response: z.object({ data: z.array(client) }),
  }),
  route('post', '/v1/clients', {
    summary: 'Create a client owned by the caller',
    auth: [...both],
    body: createClientBody,
    response: z.object({ id: clientId, name: z.string(), owner_id: z.string(), created_at: unixTime }),
  }),
  route('delete', '/v1/clients/:client_id', {
    summary: 'Delete a client (owner)',
    auth: [...both],
    params: clientParams,
    response: z.object({ id: clientId, deleted: z.literal(true) }),
    errors: [403, 404, 409],
  }),
  route('get', '/v1/clients/:client_id/members', {
    summary: "A client's members",
    auth: [...both],
    params: clientParams,
    query: pageQuery,
    response: z.object({ data: z.array(member) }),
    errors: [403, 404],
  }),
  route('post', '/v1/clients/:client_id/members', {
    summary: 'Add a member by e-mail (owner)',
    auth: [...both],
    params: clientParams,
    body: addMemberBody,
    response: member,
    errors: [403, 404, 409],
  }),
  route('delete', '/v1/clients/:client_id/members/:user_id', {
    summary: 'Remove a member (owner)',
    auth: [...both],
    params: clientParams.extend({ user_id: z.string() }),
    response: z.object({ removed: z.literal(true) }),
    errors: [403, 404, 409],
  }),

  route('post', '/v1/tokens', {
    summary: 'Mint an API token (svc_…) for one client; the secret is shown once',
    auth: ['session'],
    body: mintBody,
    response: z.object({
      id: z.number().int(),
      client_id: clientId,
      token_name: z.string(),
      token: z.string().meta({ example: 'svc_…' }),
      created_at: unixTime,
      expires_at: unixTime.nullable(),
      scopes: tokenScopes,
    }),
    errors: [403],
  }),
  route('get', '/v1/tokens', {
    summary: "The caller's API tokens (no secrets)",
    auth: ['session'],
    query: pageQuery,
    response: z.object({ data: z.array(token) }),
  }),
  route('post', '/v1/tokens/revoke', {
    summary: 'Revoke one of the caller’s API tokens',
    auth: ['session'],
    body: revokeBody,
    response: z.object({ id: z.number().int(), revoked_at: unixTime }),
    errors: [404],
  }),
  route('get', '/v1/auth/verify', {
    summary: 'Check an API token and say whom it acts for, what it reaches, spent and may spend',
    description:
      'Also answers an OAuth grant with scope `account` (CONTRACT §7): `token_id` null, plus `name`, `role` (the live role in the grant’s organization) and `oauth_client_id`.',
    auth: ['token', 'accountGrant'],
    response: z.object({
      valid: z.literal(true),
      client_id: clientId,
      user_id: z.string().nullable().meta({ description: 'null for a service account' }),
      email: z.string().nullable().meta({ description: 'null for a service account' }),
      token_id: z.number().int().nullable(),
      token_name: z.string().nullable(),
      principal: z.object({ type: z.enum(['user', 'service_account']), id: z.string() }),
      scopes: tokenScopes,
      expires_at: unixTime.nullable(),
      last_used_at: unixTime.nullable(),
      spend: z
        .object({ today: z.number().int(), week: z.number().int(), month: z.number().int() })
        .meta({ description: 'Tokens this credential debited in the UTC day, week and month' }),
      budget: z
        .object({
          budget_credits: z.number().int(),
          period: z.enum(['day', 'week', 'month']),
          spent_credits: z.number().int(),
          remaining_credits: z.number().int(),
        })
        .nullable(),
      name: z.string().optional().meta({ description: 'With an OAuth grant: the person’s name' }),
      role: z.enum(['owner', 'member', 'viewer']).optional().meta({ description: 'With an OAuth grant' }),
      oauth_client_id: z.string().optional().meta({ description: 'With an OAuth grant: the application' }),
    }),
    errors: [403],
  }),

  route('post', '/v1/auth/device/code', {
    summary: 'Start the terminal device flow',
    response: z.object({
      device_code: z.string(),
      user_code: z.string(),
      verification_uri: z.string(),
      verification_uri_complete: z.string(),
      expires_in: z.number().int(),
      interval: z.number().int(),
    }),
    errors: [429, 503],
  }),
  route('post', '/v1/auth/device/authorize', {
    summary: 'Approve a user code for one of the caller’s clients',
    auth: ['session'],
    body: authorizeBody,
    response: z.object({ status: z.literal('approved'), client_id: clientId }),
    errors: [403, 404, 429],
  }),
  route('post', '/v1/auth/device/deny', {
    summary: 'Deny a user code',
    auth: ['session'],
    body: denyBody,
    response: z.object({ status: z.literal('denied') }),
    errors: [404, 429],
  }),
  route('post', '/v1/auth/device/poll', {
    summary: 'Poll for the credential (handed out once)',
    body: pollBody,
    response: z.union([
      z.object({ status: z.literal('complete'), token: z.string(), client_id: clientId, email: z.string() }),
      z.object({ status: z.literal('authorization_pending') }),
      z.object({ status: z.literal('slow_down'), interval: z.number().int() }),
    ]),
    extra: {
      '400': {
        description: 'Denied or expired (RFC 8628 §3.5), or a bad body',
        content: {
          'application/json': {
            schema: z.union([z.object({ status: z.enum(['access_denied', 'expired_token']) }), detailError]),
          },
        },
      },
    },
    errors: [429, 503],
  }),
];
