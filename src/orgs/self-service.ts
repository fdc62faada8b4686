import { and, eq, isNull, ne } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import type { Db } from '../db/client.js';
import { memberships, orgs, users, type Role } from '../db/schema.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { removeMember, type MemberRecord, type OrgRow } from './service.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { clientIdOf } from '../ids.js';
import { transaction } from '../db/transaction.js';
import { tellMember } from './member-notices.js';
import { ORG_ERRORS } from './errors.js';

// What an organization's people do for themselves: the owner renames it and changes a
// member's role; a member or viewer leaves. Deleting stays deleteClient (./service.ts: the one place
// that ends an organization, with its billing), and removing a member stays removeMember, which leaving
// reuses, so a person who leaves loses their credentials for the organization exactly as one removed.

/** Renames a live organization (the caller's role was checked by the route). */
export async function renameClient(
  db: Db,
  orgKey: string,
  name: string,
  origin: AuditOrigin,
): Promise<OrgRow> {
  return transaction(db, async (tx) => {
    const [before] = await tx
      .select({ name: orgs.name })
      .from(orgs)
      .where(and(eq(orgs.id, orgKey), isNull(orgs.deletedAt)))
      .for('update');
    const [org] = await tx
      .update(orgs)
      .set({ name })
      .where(and(eq(orgs.id, orgKey), isNull(orgs.deletedAt)))
      .returning();
    if (!org || !before) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such client');
    const target = { type: 'client', id: clientIdOf(orgKey) };
    await recordAuditEvent(tx, {
      orgKey,
      action: 'client.renamed',
      target,
      details: { from: before.name, to: name },
      origin,
    });
    return org;
  });
}

/**
 * Sets a member's role to `member` or `viewer`. The owner's role is not changed here (400
 * CANNOT_CHANGE_OWNER): an organization has exactly one owner, and ownership is not transferable yet.
 * No credential is revoked: every spend reads the role live (CONTRACT §7: a viewer spending gets 403),
 * so a member made viewer stops spending on the next request and keeps reading. The person is mailed
 * when the role did change.
 */
export async function changeMemberRole(
  deps: Deps,
  org: OrgRow,
  userId: string,
  role: Exclude<Role, 'owner'>,
  origin: AuditOrigin,
): Promise<MemberRecord> {
  if (userId === org.ownerId)
    throw errorOf(ORG_ERRORS, 'CANNOT_CHANGE_OWNER', "the owner's role cannot be changed");
  const { db } = deps;
  let from: Role | undefined;
  const row = await transaction(db, async (tx) => {
    const [before] = await tx
      .select({ role: memberships.role })
      .from(memberships)
      .where(and(eq(memberships.orgId, org.id), eq(memberships.userId, userId)))
      .for('update');
    const [changed] = await tx
      .update(memberships)
      .set({ role })
      .where(
        and(eq(memberships.orgId, org.id), eq(memberships.userId, userId), ne(memberships.role, 'owner')),
      )
      .returning();
    from = before?.role;
    if (changed && before && before.role !== role)
      await recordAuditEvent(tx, {
        orgKey: org.id,
        action: 'member.role_changed',
        target: { type: 'user', id: userId },
        details: { from: before.role, to: role },
        origin,
      });
    return changed;
  });
  if (!row) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such member');
  if (from !== undefined && from !== role)
    await tellMember(deps, org, userId, { kind: 'role_changed', from, to: role });
  const [user] = await db.select().from(users).where(eq(users.id, userId));
  return { userId, email: user!.email, name: user!.name, role: row.role, createdAt: row.createdAt };
}

/**
 * The caller leaves the organization. The owner cannot (400 OWNER_CANNOT_LEAVE: an organization
 * without its owner would have nobody to pay or manage it; the owner deletes it instead). Otherwise it
 * is removeMember: the membership, that person's API tokens and OAuth grants for it, in one transaction.
 */
export async function leaveClient(
  deps: Deps,
  org: OrgRow,
  userId: string,
  origin: AuditOrigin,
): Promise<void> {
  if (userId === org.ownerId)
    throw errorOf(
      ORG_ERRORS,
      'OWNER_CANNOT_LEAVE',
      'the owner cannot leave the organization; delete it instead',
    );
  await removeMember(deps, org, userId, { origin, byOwner: false });
}
