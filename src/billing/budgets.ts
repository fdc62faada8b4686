import { sql } from 'drizzle-orm';
import { namedRows, queryRows, type Db } from '../db/client.js';
import type { BudgetPeriod } from '../db/tables/budgets.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { notFound } from '../http/errors.js';
import { clientIdOf, unixOfStored } from '../ids.js';
import { emitEvent } from '../events/outbox.js';
import { transaction } from '../db/transaction.js';

// Member budgets (docs/billing.md, "Member budgets"): the owner sets and clears them
// here; the hold enforces them (svc_reserve_budgeted, src/db/custom/member-budgets.sql). A budget of a
// member applies to every call the member makes in the org; a budget of a token to the calls made with
// that `svc_` token, on top of the member's.

export interface BudgetTarget {
  orgKey: string;
  userId: string;
  /** Set: the budget of this token of the member. */
  apiTokenId: number | null;
}

/** A budget as the API shows it. */
export interface BudgetJson {
  client_id: string;
  user_id: string;
  token_id: number | null;
  period: BudgetPeriod;
  budget_credits: number;
  /** Used this period: what settled calls debited plus what calls in flight hold. */
  spent_credits: number;
  remaining_credits: number;
  /** This period's start and end (unix seconds, UTC boundaries): the budget resets at period_end. */
  period_start: number;
  period_end: number;
}

interface BudgetRow {
  org_key: string;
  user_id: string;
  api_token_id: number | null;
  period: BudgetPeriod;
  limit_credits: unknown;
  spent: unknown;
  period_start: Date | string;
  period_end: Date | string;
}

function budgetJson(r: BudgetRow): BudgetJson {
  const budget = Number(r.limit_credits);
  const spent = Math.max(0, Number(r.spent ?? 0));
  return {
    client_id: clientIdOf(r.org_key),
    user_id: r.user_id,
    token_id: r.api_token_id === null ? null : Number(r.api_token_id),
    period: r.period,
    budget_credits: budget,
    spent_credits: spent,
    remaining_credits: Math.max(0, budget - spent),
    period_start: unixOfStored(r.period_start),
    period_end: unixOfStored(r.period_end),
  };
}

/**
 * What a budget's period has used, over its usage row `u` (member_budget_usage): what its holds took,
 * less what debts gave back (member_budget_returns).
 */
export const BUDGET_SPENT =
  'u.used - coalesce((select sum(x.amount) from member_budget_returns x where x.usage_id = u.id), 0)';

/**
 * The live budgets of an org (of one user when `userId` is given), each with this period's use. The
 * period is the database's: the same clock the holds count with.
 */
export async function listBudgets(db: Db, orgKey: string, userId?: string): Promise<BudgetJson[]> {
  // Named statements (decision 0128): GET /v1/auth/verify reads one member's on every call.
  const rows = await namedRows<BudgetRow>(
    db,
    userId === undefined ? 'budgets_of_org' : 'budgets_of_member',
    `with b as (
       select b.*, svc_budget_period_start(b.period, now()) as period_start
       from member_budgets b
       where b.org_key = $1 and b.cleared_at is null${userId === undefined ? '' : ' and b.user_id = $2'})
     select b.org_key, b.user_id, b.api_token_id, b.period, b.limit_credits, b.period_start,
            b.period_start + ('1 ' || b.period)::interval as period_end,
            ${BUDGET_SPENT} as spent
     from b left join member_budget_usage u on u.budget_id = b.id and u.period_start = b.period_start
     order by b.user_id, b.api_token_id nulls first`,
    userId === undefined ? [orgKey] : [orgKey, userId],
  );
  return rows.map(budgetJson);
}

const noSuchMember = () => notFound('no such member of this client');
const noSuchToken = () => notFound('no such active token of this client');

/** The member a token budget belongs to: the token's holder, the token active and of this org. */
export async function tokenHolder(db: Db, orgKey: string, apiTokenId: number): Promise<string> {
  const [row] = await queryRows<{ user_id: string }>(
    db,
    sql`select t.user_id from api_tokens t join memberships m on m.org_id = t.org_id and m.user_id = t.user_id
        where t.id = ${apiTokenId} and t.org_id = ${orgKey} and t.revoked_at is null`,
  );
  if (!row) throw noSuchToken();
  return row.user_id;
}

/**
 * A credential budget belongs to the member's credential in the org, not to one secret (CONTRACT §9):
 * the credential minted for (org, user) — a new mint, a device login — inherits the live budget of the
 * credential it replaces, with this period's use (the same budget row, moved). Every earlier credential
 * of the pair is revoked by then (one active credential, CONTRACT §6), so a live budget on any of them
 * is the replaced credential's, whether this mint revoked it or the member did before; the one set last
 * is carried. Called in the mint's transaction.
 */
export async function carryCredentialBudget(
  db: Db,
  credential: { orgKey: string; userId: string; apiTokenId: number },
): Promise<void> {
  await db.execute(
    sql`update member_budgets set api_token_id = ${credential.apiTokenId}, updated_at = now()
        where id = (select b.id from member_budgets b
                    where b.org_key = ${credential.orgKey} and b.user_id = ${credential.userId}
                      and b.api_token_id is not null and b.api_token_id <> ${credential.apiTokenId}
                      and b.cleared_at is null
                    order by b.updated_at desc, b.id desc limit 1)`,
  );
}

/** Sets (or replaces) a budget; the period's use so far stays (a new limit is not a fresh period). */
export async function setBudget(
  db: Db,
  target: BudgetTarget,
  period: BudgetPeriod,
  limitCredits: number,
  origin: AuditOrigin,
): Promise<BudgetJson> {
  const [member] = await queryRows<{ user_id: string }>(
    db,
    sql`select user_id from memberships where org_id = ${target.orgKey} and user_id = ${target.userId}`,
  );
  if (!member) throw noSuchMember();
  const conflict =
    target.apiTokenId === null
      ? sql`(org_key, user_id) where api_token_id is null`
      : sql`(api_token_id) where api_token_id is not null`;
  await transaction(db, async (tx) => {
    await tx.execute(
      sql`insert into member_budgets (org_key, user_id, api_token_id, period, limit_credits)
          values (${target.orgKey}, ${target.userId}, ${target.apiTokenId}, ${period}, ${limitCredits})
          on conflict ${conflict} do update
            set period = excluded.period, limit_credits = excluded.limit_credits, updated_at = now(), cleared_at = null`,
    );
    await recordAuditEvent(tx, budgetEvent(target, origin, { period, limit_credits: limitCredits }));
  });
  const budgets = await listBudgets(db, target.orgKey, target.userId);
  return budgets.find((b) => b.token_id === target.apiTokenId)!;
}

/** Clears a budget: calls are limited by the allocation alone again. 404 when there is none. */
export async function clearBudget(db: Db, target: BudgetTarget, origin: AuditOrigin): Promise<void> {
  await transaction(db, async (tx) => {
    const rows = await queryRows<{ id: unknown }>(
      tx,
      sql`update member_budgets set cleared_at = now(), updated_at = now()
          where org_key = ${target.orgKey} and user_id = ${target.userId} and cleared_at is null
            and ${target.apiTokenId === null ? sql`api_token_id is null` : sql`api_token_id = ${target.apiTokenId}`}
          returning id`,
    );
    if (rows.length === 0) throw notFound('no budget is set here');
    await recordAuditEvent(tx, budgetEvent(target, origin, { period: null, limit_credits: null }));
  });
}

/** A budget's audit event (CONTRACT §11 `budget.set`; a cleared budget is set to null). */
const budgetEvent = (target: BudgetTarget, origin: AuditOrigin, details: Record<string, unknown>) => ({
  orgKey: target.orgKey,
  action: 'budget.set' as const,
  origin,
  target:
    target.apiTokenId === null
      ? { type: 'member', id: target.userId }
      : { type: 'token', id: target.apiTokenId },
  details: { user_id: target.userId, ...details },
});

/**
 * A call was refused 402 member_budget_exhausted: the first refusal of a period marks the budget's period
 * row (whichever of the member's and the token's budget could not pay `least`) and emits
 * `member_budget.exhausted` in the same transaction, so the owner's endpoints hear of it once per period.
 * Off the call's path (its refusal is already decided); a failure here is tried again by the next refusal.
 */
export async function noteBudgetExhausted(
  db: Db,
  call: { orgKey: string; userId: string; apiTokenId: number | null; least: number },
): Promise<void> {
  await transaction(db, async (t) => {
    const rows = await queryRows<{
      user_id: string;
      api_token_id: number | null;
      period: BudgetPeriod;
      limit_credits: unknown;
      period_end: Date | string;
    }>(
      t,
      sql`update member_budget_usage u set exhausted_at = now()
          from member_budgets b
          where b.id = u.budget_id and b.org_key = ${call.orgKey} and b.cleared_at is null
            and ((b.api_token_id is null and b.user_id = ${call.userId}) or b.api_token_id = ${call.apiTokenId})
            and u.period_start = svc_budget_period_start(b.period, now()) and u.exhausted_at is null
            and svc_budget_room(u.id, null) < ${call.least}
          returning b.user_id, b.api_token_id, b.period, b.limit_credits,
                    u.period_start + ('1 ' || b.period)::interval as period_end`,
    );
    for (const r of rows)
      await emitEvent(t, {
        orgKey: call.orgKey,
        type: 'member_budget.exhausted',
        data: {
          user_id: r.user_id,
          token_id: r.api_token_id === null ? null : Number(r.api_token_id),
          period: r.period,
          budget_credits: Number(r.limit_credits),
          period_end: unixOfStored(r.period_end),
        },
      });
  });
}

/** What a budget may be set on in an org: its members, and their active `svc_` tokens (the owner's page). */
export async function budgetTargets(
  db: Db,
  orgKey: string,
): Promise<{
  members: { user_id: string; name: string; email: string }[];
  tokens: { token_id: number; user_id: string; token_name: string; token_prefix: string }[];
}> {
  const members = await queryRows<{ user_id: string; name: string; email: string }>(
    db,
    sql`select u.id as user_id, u.name, u.email from memberships m join users u on u.id = m.user_id
        where m.org_id = ${orgKey} order by m.created_at, m.user_id`,
  );
  const tokens = await queryRows<{
    token_id: unknown;
    user_id: string;
    token_name: string;
    token_prefix: string;
  }>(
    db,
    sql`select t.id as token_id, t.user_id, t.token_name, t.token_prefix from api_tokens t
        join memberships m on m.org_id = t.org_id and m.user_id = t.user_id
        where t.org_id = ${orgKey} and t.revoked_at is null order by t.id`,
  );
  return { members, tokens: tokens.map((t) => ({ ...t, token_id: Number(t.token_id) })) };
}
