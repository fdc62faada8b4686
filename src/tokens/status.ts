import { namedRows, type Db } from '../db/client.js';
import { isServiceAccountId, type Principal } from '../auth/principal.js';
import { createBatcher } from '../db/batch.js';
import { orgIdOf, unixOfStored } from '../ids.js';
import { BUDGET_SPENT } from '../billing/budgets.js';
import { credentialSpend, SPEND_PERIODS, spendOf } from './service.js';

// GET /v1/auth/verify (CONTRACT §6): what a credential may read of itself without an admin — who it acts
// as, what it reaches, when it expires, when it was last used, what it spent and its budget.

type ApiTokenPrincipal = Extract<Principal, { kind: 'api_token' }>;

// The token's row, its spend today, this week and this month, and its live budget with this period's use,
// in one statement: the spend as credentialSpend (tokens/service.ts) reads it from the usage rollup
// (decision 0155), the budget as listBudgets (billing/budgets.ts) does (a token has at most one budget
// row: member_budgets_token_uq). Group-committed (src/db/batch.ts): the reads that arrive while one is
// in flight go in the next statement, one row per token, so a busy server runs one statement per batch
// rather than three per request (decision 0148).
// Nothing is kept across batches: a statement starts after its request arrived, so a spend, a budget or a
// revocation is seen by the very next request.
const STATUS_READ = `with r as (select * from unnest($1::int[], $2::text[], $3::text[]) as r(token_id, org_key, user_id)),
       p as (${SPEND_PERIODS})
  select r.token_id, t.expires_at, t.last_used_at, t.scopes, s.today, s.week, s.month,
         b.period, b.limit_credits, b.spent
  from r cross join p
  left join api_tokens t on t.id = r.token_id
  cross join lateral (
    ${spendOf(`from usage_rollup u
      where u.org_key = r.org_key and u.credential = 'token:' || r.token_id and u.hour >= least(p.w, p.m)`)}) s
  left join lateral (
    select b.period, b.limit_credits, ${BUDGET_SPENT} as spent
    from member_budgets b
    left join member_budget_usage u
      on u.budget_id = b.id and u.period_start = svc_budget_period_start(b.period, now())
    where b.org_key = r.org_key and b.user_id = r.user_id and b.api_token_id = r.token_id
      and b.cleared_at is null) b on true`;

interface StatusRow {
  token_id: number;
  expires_at: Date | string | null;
  last_used_at: Date | string | null;
  scopes: string[] | null;
  today: unknown;
  week: unknown;
  month: unknown;
  period: string | null;
  limit_credits: unknown;
  spent: unknown;
}

type StatusKey = Pick<ApiTokenPrincipal, 'tokenId' | 'orgKey' | 'userId'>;

const statusReaders = new WeakMap<Db, (key: StatusKey) => Promise<StatusRow | undefined>>();

/** The status read of `db`, one statement per batch; a token's id names its organization and holder. */
function statusReader(db: Db) {
  let read = statusReaders.get(db);
  if (!read) {
    read = createBatcher<StatusKey, StatusRow | undefined>(async (keys) => {
      const unique = [...new Map(keys.map((k) => [k.tokenId, k])).values()];
      const rows = await namedRows<StatusRow>(db, 'tokens_status', STATUS_READ, [
        unique.map((k) => k.tokenId),
        unique.map((k) => k.orgKey),
        unique.map((k) => k.userId),
      ]);
      const byToken = new Map(rows.map((row) => [Number(row.token_id), row]));
      return keys.map((k) => byToken.get(k.tokenId));
    });
    statusReaders.set(db, read);
  }
  return read;
}

export async function credentialStatus(db: Db, principal: ApiTokenPrincipal) {
  const serviceAccount = isServiceAccountId(principal.userId);
  const row = await statusReader(db)(principal);
  const budgetCredits = Number(row?.limit_credits);
  const spent = Math.max(0, Number(row?.spent ?? 0));
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
    spend: { today: Number(row?.today ?? 0), week: Number(row?.week ?? 0), month: Number(row?.month ?? 0) },
    budget: row?.period
      ? {
          budget_credits: budgetCredits,
          period: row.period,
          spent_credits: spent,
          remaining_credits: Math.max(0, budgetCredits - spent),
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
