import { and, eq, inArray, isNull, ne, sql } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { queryRows, type Db } from '../db/client.js';
import {
  accountTokens,
  apiTokens,
  billingSubscriptions,
  memberships,
  orgs,
  recoveryCodes,
  users,
} from '../db/schema.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { debtOf } from '../billing/debt.js';
import { revokeOrgTokens } from '../tokens/service.js';
import { confirmPerson } from './reauthentication.js';
import { recordUsedTrial } from './trial-addresses.js';
import { revokeCredentialsAfterPasswordChange } from './credential-revocation.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { accountEvent } from '../audit/account-events.js';
import { transaction } from '../db/transaction.js';
import { ACCOUNT_ERRORS } from './errors.js';

// Deleting one's own account (the rule is written out in docs/accounts.md "Deleting an
// account"). The ledger is append-only (src/db/custom/immutable-ledger.sql) and its rows name the
// person (pool:<user id>, debt:<user id>, the usage records' acting user), so the person's row is not
// deleted: it is anonymised (e-mail, name, password, 2FA gone; `deleted_at` set), and every history row
// keeps pointing at a row that exists. What the person owned ends:
//   - every organization they own is soft-deleted exactly as DELETE /v1/clients/{id} does it (the
//     orgDeleted hooks: the balance back to the pool through a `reclaim` ledger row, calls in flight
//     billed from the pool for what they ran); the default one too, which only account deletion may
//     delete;
//   - their memberships of other people's organizations end;
//   - every credential is revoked: sessions, OAuth grants, codes and approvals not yet collected
//     (revokeCredentialsAfterPasswordChange, keeping none) and, unlike a password change, every svc_
//     token, since nobody is left for a script to act as.
// The tokens left in the pool are forfeited: they stay in `pool:<user id>`, where reconcile still
// counts them, and nobody can spend them.
//
// Refused (409 ACCOUNT_DELETION_BLOCKED, every reason listed) while deleting would leave someone or
// something hanging:
//   - an owned organization has other members: their shared balance, projects and access would vanish
//     under them. There is no ownership transfer; the owner removes them or deletes the organization;
//   - the person owes tokens (debt, CONTRACT §8): walking away must not wipe a debt;
//   - a Pro subscription would renew: the processor would go on charging a card for a deleted account.

export type DeletionBlocker =
  | { code: 'OWNS_SHARED_ORGANIZATION'; message: string; client_id: string }
  | { code: 'OUTSTANDING_DEBT'; message: string; debt_credits: number }
  | { code: 'ACTIVE_SUBSCRIPTION'; message: string; client_id: string };

export interface DeletionPreview {
  blockers: DeletionBlocker[];
  /** The organizations that will be deleted with the account (all the person owns). */
  ownedOrganizations: { orgKey: string; name: string; isDefault: boolean }[];
  /** Memberships of other people's organizations that end. */
  otherMemberships: number;
  /** Unspent tokens (the pool plus every owned organization's balance) that are forfeited. */
  forfeitedCredits: number;
}

// Subscription statuses after which the processor charges again (Stripe's list; `canceled`,
// `incomplete_expired` and a subscription set to cancel at period end will not).
const RENEWING = ['active', 'trialing', 'past_due', 'unpaid', 'incomplete'];

const num = (v: unknown): number => Number(v ?? 0);

/** What deleting the account would do, and what stops it now. Read-only; the page shows it first. */
export async function deletionPreview(db: Db, userId: string): Promise<DeletionPreview> {
  const owned = await queryRows<{ id: string; name: string; is_default: boolean; others: unknown }>(
    db,
    sql`select o.id, o.name, o.is_default,
          (select count(*) from memberships m where m.org_id = o.id and m.user_id <> ${userId}) as others
        from orgs o where o.owner_id = ${userId} and o.deleted_at is null
        order by o.is_default desc, o.created_at, o.id`,
  );
  const blockers: DeletionBlocker[] = owned
    .filter((o) => num(o.others) > 0)
    .map((o) => ({
      code: 'OWNS_SHARED_ORGANIZATION',
      client_id: `client_${o.id}`,
      message: `you own “${o.name}”, which has ${num(o.others)} other member(s): remove them or delete the organization first`,
    }));
  const debt = await debtOf(db, userId);
  if (debt > 0)
    blockers.push({
      code: 'OUTSTANDING_DEBT',
      debt_credits: debt,
      message: `you owe ${debt} tokens; a purchase pays the debt first`,
    });
  const keys = owned.map((o) => o.id);
  for (const s of await renewingSubscriptions(db, keys))
    blockers.push({
      code: 'ACTIVE_SUBSCRIPTION',
      client_id: `client_${s.orgKey}`,
      message: `the Pro subscription of “${s.name}” renews: cancel it at period end on its billing page first`,
    });
  const [balances] = await queryRows<{ total: unknown }>(
    db,
    sql`select coalesce(sum(balance), 0) as total from billing_accounts
        where id = ${`pool:${userId}`} or (kind = 'org' and user_id = ${userId} and org_key in (
          select id from orgs where owner_id = ${userId} and deleted_at is null))`,
  );
  const [others] = await queryRows<{ n: unknown }>(
    db,
    sql`select count(*) as n from memberships m join orgs o on o.id = m.org_id
        where m.user_id = ${userId} and o.owner_id <> ${userId} and o.deleted_at is null`,
  );
  return {
    blockers,
    ownedOrganizations: owned.map((o) => ({ orgKey: o.id, name: o.name, isDefault: Boolean(o.is_default) })),
    otherMemberships: num(others?.n),
    forfeitedCredits: num(balances?.total),
  };
}

async function renewingSubscriptions(db: Db, orgKeys: string[]) {
  if (orgKeys.length === 0) return [];
  return db
    .selectDistinct({ orgKey: billingSubscriptions.orgKey, name: orgs.name })
    .from(billingSubscriptions)
    .innerJoin(orgs, eq(orgs.id, billingSubscriptions.orgKey))
    .where(
      and(
        inArray(billingSubscriptions.orgKey, orgKeys),
        inArray(billingSubscriptions.status, RENEWING),
        eq(billingSubscriptions.cancelAtPeriodEnd, false),
      ),
    );
}

export interface DeletionResult {
  deletedOrganizations: number;
  forfeitedCredits: number;
  revoked: { sessions: number; oauthGrants: number; apiTokens: number };
}

/**
 * Deletes the account after re-confirming the person (./reauthentication.ts): their password and, with
 * 2FA on, a TOTP or recovery code, checked together (400 WRONG_PASSWORD, or with 2FA on 400
 * WRONG_PASSWORD_OR_CODE whichever was wrong; 400 CODE_REQUIRED; failures count as sign-in failures). The
 * rule is checked again inside the transaction, with the person's row locked, so two deletions (or a
 * deletion racing a page that adds a member) cannot both pass.
 */
export async function deleteAccount(
  deps: Deps,
  input: { userId: string; password: string; code?: string; origin: AuditOrigin },
): Promise<DeletionResult> {
  const { origin } = input;
  const [user] = await deps.db.select().from(users).where(eq(users.id, input.userId));
  if (!user || user.deletedAt) throw errorOf(COMMON_ERRORS, 'INVALID_TOKEN', 'invalid token');
  await confirmPerson(deps, user, { ...input, secondFactor: true });
  return transaction(deps.db, async (t) => {
    await t.execute(sql`select id from users where id = ${user.id} for update`);
    const preview = await deletionPreview(t, user.id);
    if (preview.blockers.length > 0)
      throw errorOf(
        ACCOUNT_ERRORS,
        'ACCOUNT_DELETION_BLOCKED',
        preview.blockers.map((b) => b.message).join('; '),
        {
          fields: { blockers: preview.blockers },
        },
      );
    const now = new Date();
    // The person's svc_ tokens, in every organization (counted in the answer).
    const tokens = await t
      .update(apiTokens)
      .set({ revokedAt: now })
      .where(and(eq(apiTokens.userId, user.id), isNull(apiTokens.revokedAt)))
      .returning({ id: apiTokens.id, orgId: apiTokens.orgId });
    for (const token of tokens)
      await recordAuditEvent(t, {
        orgKey: token.orgId,
        action: 'token.revoked',
        target: { type: 'token', id: token.id },
        details: { holder_id: user.id, reason: 'account_deleted' },
        origin,
      });
    const deleted = await t
      .update(orgs)
      .set({ deletedAt: now })
      .where(and(eq(orgs.ownerId, user.id), isNull(orgs.deletedAt)))
      .returning({ id: orgs.id });
    for (const org of deleted) {
      await revokeOrgTokens(t, org.id, origin);
      await recordAuditEvent(t, {
        orgKey: org.id,
        action: 'client.deleted',
        target: { type: 'client', id: `client_${org.id}` },
        details: { reason: 'account_deleted' },
        origin,
      });
      for (const hook of deps.hooks.orgDeleted) await hook(t, { orgKey: org.id, ownerId: user.id });
    }
    // Memberships of other people's organizations end (the owner memberships of the deleted ones stay
    // with their soft-deleted organizations, as after DELETE /v1/clients/{id}).
    const left = await t
      .delete(memberships)
      .where(and(eq(memberships.userId, user.id), ne(memberships.role, 'owner')))
      .returning({ orgId: memberships.orgId, role: memberships.role });
    for (const m of left)
      await recordAuditEvent(t, {
        orgKey: m.orgId,
        action: 'member.removed',
        target: { type: 'user', id: user.id },
        details: { role: m.role, reason: 'account_deleted' },
        origin,
      });
    const credentials = await revokeCredentialsAfterPasswordChange(t, user.id, { origin });
    await recordAuditEvent(
      t,
      accountEvent(user.id, 'account.deleted', origin, { organizations_deleted: deleted.length }),
    );
    await t.delete(recoveryCodes).where(eq(recoveryCodes.userId, user.id));
    await t.delete(accountTokens).where(eq(accountTokens.userId, user.id));
    // One trial per address (CONTRACT §8): the mailbox is remembered as a keyed hash, before the
    // address itself is erased below.
    await recordUsedTrial(t, deps.keys.hmac, user.email);
    // Anonymised, not deleted (see the top of this file). The e-mail is freed for a new registration;
    // `.invalid` is reserved (RFC 2606), so no mail can reach the placeholder. The password hash is no
    // hash at all: verifyPassword (./password.ts) answers false for it.
    await t
      .update(users)
      .set({
        email: `deleted-${user.id}@deleted.invalid`,
        name: 'Deleted account',
        passwordHash: '!deleted',
        emailVerifiedAt: null,
        totpSecretEnc: null,
        totpEnabledAt: null,
        totpLastStep: null,
        deletedAt: now,
      })
      .where(eq(users.id, user.id));
    return {
      deletedOrganizations: deleted.length,
      forfeitedCredits: preview.forfeitedCredits,
      revoked: {
        sessions: credentials.sessionsRevoked,
        oauthGrants: credentials.grantsRevoked,
        apiTokens: tokens.length,
      },
    };
  });
}
