import { and, asc, eq, isNull, sql, type SQL } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import type { Db } from '../db/client.js';
import { retryOnDeadlock } from '../db/deadlock.js';
import { isPersonId, memberships, orgs, users, type Role } from '../db/schema.js';
import { membershipUnavailable, errorOf, COMMON_ERRORS } from '../http/errors.js';
import { unknownCursor, type Page } from '../http/pagination.js';
import { clientIdOf, newOrgKey } from '../ids.js';
import { normaliseEmail } from '../accounts/service.js';
import { revokeOrgTokens } from '../tokens/service.js';
import { liveRole, roleAtLeast } from './membership.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { transaction } from '../db/transaction.js';
import { tellMember } from './member-notices.js';
import { ORG_ERRORS } from './errors.js';
import { ACCOUNT_ERRORS } from '../accounts/errors.js';

// Clients (organizations) and their members (interface document: Clients, Team membership; CONTRACT §5).

export type OrgRow = typeof orgs.$inferSelect;

export interface MemberRecord {
  userId: string;
  email: string;
  name: string;
  role: Role;
  createdAt: Date;
}

/**
 * The live org and the caller's role in it, refusing what the caller may not do:
 * 404 NOT_FOUND when the org does not exist (or was deleted); 403 NO_ACCESS when the caller is not a
 * live member or lacks `minRole` (the document's rule for resources of a client one does not belong
 * to: Projects rule 1, Billing rule 1); 503 when membership cannot be established.
 */
export async function requireOrgRole(
  db: Db,
  userId: string,
  orgKey: string,
  minRole: Role,
): Promise<{ org: OrgRow; role: Role }> {
  let org: OrgRow | undefined;
  try {
    [org] = await db
      .select()
      .from(orgs)
      .where(and(eq(orgs.id, orgKey), isNull(orgs.deletedAt)));
  } catch {
    throw membershipUnavailable();
  }
  if (!org) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such client');
  const role = await liveRole(db, userId, orgKey);
  if (!role) throw errorOf(COMMON_ERRORS, 'NO_ACCESS', 'you are not a member of this client');
  if (!roleAtLeast(role, minRole))
    throw errorOf(COMMON_ERRORS, 'NO_ACCESS', `this needs the ${minRole} role`);
  return { org, role };
}

/** A new, non-default client owned by the caller, with the owner membership, in one transaction. */
export async function createClient(db: Db, ownerId: string, name: string): Promise<OrgRow> {
  return transaction(db, async (tx) => {
    const [org] = await tx
      .insert(orgs)
      .values({ id: newOrgKey(), name, ownerId, isDefault: false })
      .returning();
    await tx.insert(memberships).values({ orgId: org!.id, userId: ownerId, role: 'owner' });
    return org!;
  });
}

/**
 * Soft-deletes a client (owner only, never the default one: CONTRACT §5). In the same transaction its
 * credentials are revoked and the orgDeleted hooks run (billing returns the allocation to the pool).
 */
export async function deleteClient(
  deps: Deps,
  userId: string,
  orgKey: string,
  origin: AuditOrigin,
): Promise<OrgRow> {
  const { org } = await requireOrgRole(deps.db, userId, orgKey, 'owner');
  if (org.isDefault)
    throw errorOf(ORG_ERRORS, 'CANNOT_DELETE_DEFAULT', 'the default client cannot be deleted');
  // The billing hook takes its locks in the one order every billing path takes (hold rows, then accounts:
  // src/billing/deleted-client.ts), so no deadlock is expected; the retry stays as a guard, because a
  // victim of one is rolled back whole and can simply run again.
  return retryOnDeadlock(() =>
    transaction(deps.db, async (tx) => {
      const [deleted] = await tx
        .update(orgs)
        .set({ deletedAt: new Date() })
        .where(and(eq(orgs.id, orgKey), isNull(orgs.deletedAt)))
        .returning();
      if (!deleted) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such client');
      await revokeOrgTokens(tx, orgKey, origin);
      await recordAuditEvent(tx, {
        orgKey,
        action: 'client.deleted',
        target: { type: 'client', id: clientIdOf(orgKey) },
        origin,
      });
      for (const hook of deps.hooks.orgDeleted) await hook(tx, { orgKey, ownerId: deleted.ownerId });
      return deleted;
    }),
  );
}

/**
 * The org's members, oldest first (the owner first: docs/orgs-tokens-device.md; user id breaking ties),
 * in memberships_org_time_idx's order so a page is read from the index; one page when `page` is given,
 * else all. `startingAfter` is the user id of a member of this org (CONTRACT §3).
 */
export async function listMembers(db: Db, orgKey: string, page?: Page): Promise<MemberRecord[]> {
  let after: SQL | undefined;
  if (page?.startingAfter !== undefined) {
    const [c] = await db
      .select({ userId: memberships.userId })
      .from(memberships)
      .where(and(eq(memberships.orgId, orgKey), eq(memberships.userId, page.startingAfter)));
    if (!c) throw unknownCursor();
    // The cursor's time read in the statement (a JS Date would drop PostgreSQL's microseconds).
    after = sql`(${memberships.createdAt}, ${memberships.userId}) > ((select c.created_at from memberships c
      where c.org_id = ${orgKey} and c.user_id = ${c.userId}), ${c.userId})`;
  }
  const members = db
    .select({
      userId: users.id,
      email: users.email,
      name: users.name,
      role: memberships.role,
      createdAt: memberships.createdAt,
    })
    .from(memberships)
    .innerJoin(users, eq(users.id, memberships.userId))
    .where(and(eq(memberships.orgId, orgKey), isPersonId(memberships.userId), after))
    .orderBy(asc(memberships.createdAt), asc(memberships.userId));
  return page ? members.limit(page.limit).offset(page.offset) : members;
}

/**
 * Adds an already registered, verified account by e-mail (trimmed, case-insensitive; never inferred
 * from a domain), and mails them that it did. 404 USER_NOT_FOUND otherwise — the same answer for unknown
 * and unverified, so the route does not tell which; 409 ALREADY_MEMBER (CONTRACT §5).
 */
export async function addMemberByEmail(
  deps: Deps,
  org: Pick<OrgRow, 'id' | 'name'>,
  email: string,
  role: Exclude<Role, 'owner'>,
  origin: AuditOrigin,
): Promise<MemberRecord> {
  const { db } = deps;
  const orgKey = org.id;
  const [user] = await db
    .select()
    .from(users)
    .where(and(eq(users.email, normaliseEmail(email)), isPersonId(users.id)));
  if (!user || !user.emailVerifiedAt)
    throw errorOf(ACCOUNT_ERRORS, 'USER_NOT_FOUND', 'no registered, verified account has this e-mail');
  const row = await transaction(db, async (tx) => {
    const [added] = await tx
      .insert(memberships)
      .values({ orgId: orgKey, userId: user.id, role })
      .onConflictDoNothing()
      .returning();
    if (added) await recordAuditEvent(tx, { orgKey, ...memberAdded(user.id, role), origin });
    return added;
  });
  if (!row) throw errorOf(ORG_ERRORS, 'ALREADY_MEMBER', 'this account is already a member of the client');
  await tellMember(deps, org, user.id, { kind: 'added', role: row.role });
  return { userId: user.id, email: user.email, name: user.name, role: row.role, createdAt: row.createdAt };
}

/**
 * Removes a member (never the owner: 400 CANNOT_REMOVE_OWNER). ONE transaction deletes the membership,
 * revokes that user's API tokens for this client and runs the memberRemoved hooks (OAuth grants), so
 * access ends on the very next request (CONTRACT §5; States: Membership live → removed).
 */
export async function removeMember(
  deps: Deps,
  org: OrgRow,
  userId: string,
  { origin, byOwner = true }: { origin: AuditOrigin; byOwner?: boolean },
): Promise<void> {
  if (userId === org.ownerId) throw errorOf(ORG_ERRORS, 'CANNOT_REMOVE_OWNER', 'the owner cannot be removed');
  await transaction(deps.db, async (tx) => {
    const [removed] = await tx
      .delete(memberships)
      .where(and(eq(memberships.orgId, org.id), eq(memberships.userId, userId)))
      .returning();
    if (!removed) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such member');
    if (removed.role === 'owner')
      throw errorOf(ORG_ERRORS, 'CANNOT_REMOVE_OWNER', 'the owner cannot be removed');
    await revokeOrgTokens(tx, org.id, origin, userId);
    await recordAuditEvent(tx, {
      orgKey: org.id,
      action: 'member.removed',
      target: { type: 'user', id: userId },
      details: { role: removed.role },
      origin,
    });
    for (const hook of deps.hooks.memberRemoved) await hook(tx, { orgKey: org.id, userId }, origin);
  });
  // A person who left knows it; one the owner removed is told.
  if (byOwner) await tellMember(deps, org, userId, { kind: 'removed' });
}

/** The audit event of a new membership (CONTRACT §11), by the owner or by an accepted invitation. */
export const memberAdded = (userId: string, role: Role, invitationId?: string) => ({
  action: 'member.added' as const,
  target: { type: 'user', id: userId },
  details: { role, ...(invitationId === undefined ? {} : { invitation_id: invitationId }) },
});
