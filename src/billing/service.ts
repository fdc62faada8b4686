import { randomUUID } from 'node:crypto';
import { and, eq, isNull } from 'drizzle-orm';
import { sql } from 'drizzle-orm';
import { namedRows, queryRows, type Db } from '../db/client.js';
import { orgs, type Role } from '../db/schema.js';
import { errorOf, membershipUnavailable, noAccess } from '../http/errors.js';
import { BILLING_ERRORS } from './errors.js';
import { debtFromBalance } from './debt.js';
import {
  debtAccount,
  InsufficientFunds,
  ensureDebtAccount,
  ensureOrgAccounts,
  ensurePool,
  grantToOrg,
  lifetimeGrantedText,
  lockAccounts,
  orgAccount,
  poolAccount,
  SOURCE_TRIAL,
  transfer,
} from './ledger.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { transaction } from '../db/transaction.js';

// The owner's pool and its allocations (interface document: Owner balance, Billing rules 1–2;
// CONTRACT §8). global_credits is derived here on every read, never stored.

/** Interface document, Token economics and Limits. */
export const TRIAL_CREDITS = 50_000;
export const PRO_PERIOD_CREDITS = 210_000;
/** 1 unit of currency = 1,000 tokens, so one cent = 10 tokens (src/billing/par.ts). */
export { CREDITS_PER_CENT } from './par.js';

const num = (v: unknown): number => Number(v ?? 0);

export interface OwnerBalance {
  owner_id: string;
  global_credits: number;
  unallocated_credits: number;
  lifetime_granted_credits: number;
  /** What the owner owes (CONTRACT §8 "Debt"; debt.ts): a field of ours beside the document's. */
  debt_credits: number;
  allocations: { org_id: string; name: string; is_default: boolean; allocated_credits: number }[];
}

// The two balance reads a portal or a CLI asks on every visit, as named statements (decision 0127): the
// SQL text written once per process, parsed and planned once per pooled connection, no ORM building it
// on every request (src/db/client.ts, namedRows). Each still runs on every request.

/**
 * GET /v1/owner/balance. One statement, so one snapshot: the pool, the allocations and the debt it sums
 * are read at the same instant (four reads could straddle an allocation and show tokens twice or not at
 * all). $1 the pool's account, $2 the debt's, $3 the owner.
 */
const OWNER_BALANCE_READ = `select
    (select balance from billing_accounts where id = $1) as pool,
    (select balance from billing_accounts where id = $2) as debt,
    ${lifetimeGrantedText('$1')} as granted,
    (select coalesce(json_agg(json_build_array(o.id, o.name, o.is_default, coalesce(a.balance, 0))
              order by o.is_default desc, o.created_at, o.id), '[]')
      from orgs o left join billing_accounts a on a.id = 'org:' || o.id
      where o.owner_id = $3 and o.deleted_at is null) as allocations`;

export async function ownerBalance(db: Db, userId: string): Promise<OwnerBalance> {
  const [row] = await namedRows<{ pool: unknown; debt: unknown; granted: unknown; allocations: unknown }>(
    db,
    'billing_owner_balance',
    OWNER_BALANCE_READ,
    [poolAccount(userId), debtAccount(userId), userId],
  );
  const { pool, debt, granted, allocations } = row ?? {};
  const listed = (typeof allocations === 'string' ? JSON.parse(allocations) : allocations) as [
    string,
    string,
    boolean,
    number | string,
  ][];
  const unallocated = num(pool);
  const allocated = listed.map(([id, name, isDefault, balance]) => ({
    org_id: `client_${id}`,
    name,
    is_default: Boolean(isDefault),
    allocated_credits: num(balance),
  }));
  return {
    owner_id: userId,
    global_credits: unallocated + allocated.reduce((s, a) => s + a.allocated_credits, 0),
    unallocated_credits: unallocated,
    lifetime_granted_credits: num(granted),
    debt_credits: debtFromBalance(debt),
    allocations: allocated,
  };
}

/** A live org and its owner, or null. */
export async function findLiveOrg(db: Db, orgKey: string) {
  const [org] = await db
    .select()
    .from(orgs)
    .where(and(eq(orgs.id, orgKey), isNull(orgs.deletedAt)));
  return org ?? null;
}

/**
 * PUT …/allocation: sets the client's balance to `target`; the difference comes from or goes back to
 * the pool, atomically (CONTRACT §8). 402 INSUFFICIENT_UNALLOCATED when the pool cannot fund a raise;
 * 409 CREDITS_IN_USE when a reclaim would take tokens held by calls in flight.
 */
export async function setAllocation(
  db: Db,
  input: { userId: string; orgKey: string; target: number; origin: AuditOrigin },
): Promise<void> {
  await transaction(db, async (t) => {
    // The caller found the client live, but a deletion may have committed since: re-read under a lock of
    // the client's row (taken before the accounts, and before creating them, as a deletion takes it), so
    // tokens are never allocated to a deleted client (they would be stranded there; deleted-client.ts).
    const [live] = await queryRows<{ id: string }>(
      t,
      sql`select id from orgs where id = ${input.orgKey} and deleted_at is null for share`,
    );
    if (!live) throw noAccess("only the client's owner may set its allocation");
    await ensureOrgAccounts(t, input.orgKey, input.userId);
    const org = orgAccount(input.orgKey);
    const pool = poolAccount(input.userId);
    const locked = await lockAccounts(t, [debtAccount(input.userId), org, pool]);
    const current = locked.get(org)!;
    const delta = input.target - current.balance;
    // CONTRACT §8: while the owner is in debt no allocation can be raised (tokens lowered or moved back
    // to the pool still can; the next grant pays the debt first).
    if (delta > 0 && (locked.get(debtAccount(input.userId))?.balance ?? 0) < 0) {
      throw errorOf(BILLING_ERRORS, 'OWNER_IN_DEBT');
    }
    const key = `alloc:${randomUUID()}`;
    try {
      if (delta > 0) {
        await transfer(t, {
          key,
          from: pool,
          to: org,
          amount: delta,
          type: 'allocate',
          shownTo: { orgKey: input.orgKey, side: 'to' },
        });
      } else if (delta < 0) {
        if (input.target < current.held) {
          throw errorOf(BILLING_ERRORS, 'CREDITS_IN_USE');
        }
        await transfer(t, {
          key,
          from: org,
          to: pool,
          amount: -delta,
          type: 'reclaim',
          shownTo: { orgKey: input.orgKey, side: 'from' },
        });
      }
    } catch (err) {
      if (err instanceof InsufficientFunds && err.accountId === pool) {
        throw errorOf(BILLING_ERRORS, 'INSUFFICIENT_UNALLOCATED');
      }
      throw err;
    }
    await t.execute(sql`update billing_accounts set allocation = ${input.target} where id = ${org}`);
    await recordAuditEvent(t, {
      orgKey: input.orgKey,
      action: 'allocation.changed',
      origin: input.origin,
      target: { type: 'client', id: `client_${input.orgKey}` },
      details: { from_credits: current.balance, to_credits: input.target },
    });
  });
}

/**
 * Registration hook: the trial, granted to the pool and allocated at once to the default client; once per
 * address (CONTRACT §8): a mailbox whose deleted account had it gets none (its pool exists, empty).
 */
export async function grantTrial(
  tx: Db,
  account: { user: { id: string }; org: { id: string }; trialEligible: boolean },
): Promise<void> {
  await ensurePool(tx, account.user.id);
  if (!account.trialEligible) {
    // The accounts a grant would have made, so the client is the same as any other at zero.
    await ensureOrgAccounts(tx, account.org.id, account.user.id);
    await ensureDebtAccount(tx, account.user.id);
    return;
  }
  await grantToOrg(tx, {
    key: `trial:${account.user.id}`,
    source: SOURCE_TRIAL,
    ownerId: account.user.id,
    orgKey: account.org.id,
    amount: TRIAL_CREDITS,
    type: 'trial',
    description: 'Free trial',
  });
}

/** The client's Token balance (interface document: Client token balance). */
export async function clientBalance(db: Db, orgKey: string) {
  const [row] = await queryRows<{ balance: unknown; allocation: unknown }>(
    db,
    sql`select balance, allocation from billing_accounts where id = ${orgAccount(orgKey)}`,
  );
  return {
    org_id: `client_${orgKey}`,
    balance_credits: num(row?.balance),
    allocation_credits: num(row?.allocation),
  };
}

/**
 * GET /v1/clients/{id}/credits/balance: the caller's live role in the client and the client's balance,
 * in one statement (one round trip, one snapshot). Null when the caller is no live member; the route
 * decides who may see the balance. $1 the caller, $2 the client, $3 its account.
 */
const CLIENT_BALANCE_READ = `select m.role, a.balance, a.allocation
    from memberships m
    join orgs o on o.id = m.org_id and o.deleted_at is null
    left join billing_accounts a on a.id = $3
    where m.user_id = $1 and m.org_id = $2`;

export async function clientBalanceOfMember(db: Db, userId: string, orgKey: string) {
  let rows: { role: Role; balance: unknown; allocation: unknown }[];
  try {
    rows = await namedRows(db, 'billing_client_balance', CLIENT_BALANCE_READ, [
      userId,
      orgKey,
      orgAccount(orgKey),
    ]);
  } catch {
    // As the membership read alone answered (src/orgs/membership.ts): fail closed, 503.
    throw membershipUnavailable();
  }
  const [row] = rows;
  if (!row) return null;
  return {
    role: row.role,
    balance: {
      org_id: `client_${orgKey}`,
      balance_credits: num(row.balance),
      allocation_credits: num(row.allocation),
    },
  };
}
