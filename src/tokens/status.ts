import { namedRows, type Db } from '../db/client.js';
import { isServiceAccountId, type Principal } from '../auth/principal.js';
import { listBudgets } from '../billing/budgets.js';
import { orgIdOf, unixOfStored } from '../ids.js';
import { credentialSpend } from './service.js';

// GET /v1/auth/verify (CONTRACT §6): what a credential may read of itself without an admin — who it acts
// as, what it reaches, when it expires, when it was last used, what it spent and its budget.

type ApiTokenPrincipal = Extract<Principal, { kind: 'api_token' }>;

export async function credentialStatus(db: Db, principal: ApiTokenPrincipal) {
  const serviceAccount = isServiceAccountId(principal.userId);
  const [[row], spend, budgets] = await Promise.all([
    // A named statement, as the two reads beside it (decision 0128).
    namedRows<{ expires_at: Date | string | null; last_used_at: Date | string | null; scopes: string[] }>(
      db,
      'tokens_status_row',
      'select expires_at, last_used_at, scopes from api_tokens where id = $1',
      [principal.tokenId],
    ),
    credentialSpend(db, principal.orgKey, principal.tokenId),
    listBudgets(db, principal.orgKey, principal.userId),
  ]);
  const budget = budgets.find((b) => b.token_id === principal.tokenId);
  return {
    valid: true,
    client_id: orgIdOf(principal.orgKey),
    // A service account is no person: no user id or address of its own (its id is the principal's).
    user_id: serviceAccount ? null : principal.userId,
    email: serviceAccount ? null : principal.email,
    token_id: principal.tokenId,
    token_name: principal.tokenName,
    principal: { type: serviceAccount ? 'service_account' : 'user', id: principal.userId },
    scopes: row?.scopes ?? principal.scopes,
    expires_at: unixOfStored(row?.expires_at),
    last_used_at: unixOfStored(row?.last_used_at),
    spend,
    budget: budget
      ? {
          budget_credits: budget.budget_credits,
          period: budget.period,
          spent_credits: budget.spent_credits,
          remaining_credits: budget.remaining_credits,
        }
      : null,
  };
}

type GrantPrincipal = Extract<Principal, { kind: 'grant' }>;

/**
 * GET /v1/auth/verify for an OAuth grant with scope `account` (CONTRACT §6, §7): the same shape, with
 * `token_id: null`; `role` is the person's live role in the grant's organization; a grant has no
 * `svc_` budget and its access token's expiry is its own business (it is refreshed), so `expires_at` is null.
 */
export async function grantStatus(db: Db, principal: GrantPrincipal) {
  return {
    valid: true,
    client_id: orgIdOf(principal.orgKey),
    user_id: principal.userId,
    email: principal.email,
    token_id: null,
    token_name: null,
    principal: { type: 'user', id: principal.userId },
    scopes: principal.scopes,
    expires_at: null,
    last_used_at: null,
    spend: await credentialSpend(db, principal.orgKey, { grantId: principal.grantId }),
    budget: null,
    name: principal.name,
    role: principal.role,
    oauth_client_id: principal.clientId,
  };
}
