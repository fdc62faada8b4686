import type { RequestHandler } from 'express';
import { and, eq, isNull, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { preparedRead } from '../db/prepared.js';
import { memberships, orgs, users, type Role } from '../db/schema.js';
import { invalidToken, membershipUnavailable, errorOf, COMMON_ERRORS } from '../http/errors.js';

// The membership guard (interface document: Authentication 5). Every spend, run, MCP call and protected
// account operation asks it; it never answers from a cache, so a removal takes effect on the next request.

const RANK: Record<Role, number> = { viewer: 1, member: 2, owner: 3 };

export const roleAtLeast = (role: Role, min: Role): boolean => RANK[role] >= RANK[min];

const liveRoleRead = preparedRead(
  (db, name) =>
    db
      .select({ role: memberships.role })
      .from(memberships)
      .innerJoin(orgs, eq(orgs.id, memberships.orgId))
      .where(
        and(
          eq(memberships.userId, sql.placeholder('userId')),
          eq(memberships.orgId, sql.placeholder('orgKey')),
          isNull(orgs.deletedAt),
        ),
      )
      .prepare(name),
  'orgs_live_role',
);

/** The user's live role in the org, or null. Throws 503 when the database cannot answer (fail closed). */
export async function liveRole(db: Db, userId: string, orgKey: string): Promise<Role | null> {
  let rows: { role: Role }[];
  try {
    rows = await liveRoleRead(db).execute({ userId, orgKey });
  } catch {
    throw membershipUnavailable();
  }
  return rows[0]?.role ?? null;
}

/** 403 NOT_A_MEMBER when the user does not (or no longer) belong to the org; 503 when unknown. */
export async function requireLiveMembership(db: Db, userId: string, orgKey: string): Promise<Role> {
  const role = await liveRole(db, userId, orgKey);
  if (!role) throw errorOf(COMMON_ERRORS, 'NOT_A_MEMBER', 'the user does not belong to this organization');
  return role;
}

export interface LiveOrg {
  orgKey: string;
  name: string;
  role: Role;
  isDefault: boolean;
  ownerId: string;
  createdAt: Date;
}

const liveMembershipsRead = preparedRead(
  (db, name) =>
    db
      .select({
        orgKey: orgs.id,
        name: orgs.name,
        role: memberships.role,
        isDefault: orgs.isDefault,
        ownerId: orgs.ownerId,
        createdAt: orgs.createdAt,
      })
      .from(memberships)
      .innerJoin(orgs, eq(orgs.id, memberships.orgId))
      .innerJoin(users, eq(users.id, memberships.userId))
      .where(and(eq(memberships.userId, sql.placeholder('userId')), isNull(orgs.deletedAt)))
      .orderBy(orgs.createdAt)
      .prepare(name),
  'orgs_live_memberships',
);

/** Every live membership of a user, the default client first (consent and device pages offer these). */
export async function liveMemberships(db: Db, userId: string): Promise<LiveOrg[]> {
  let rows: LiveOrg[];
  try {
    rows = await liveMembershipsRead(db).execute({ userId });
  } catch {
    throw membershipUnavailable();
  }
  // The user's own default client first, then the rest in creation order.
  return rows.sort(
    (a, b) => Number(b.isDefault && b.ownerId === userId) - Number(a.isDefault && a.ownerId === userId),
  );
}

/** The user's own default organization, if it is still a live membership (created at registration). */
export async function defaultOrgKey(db: Db, userId: string): Promise<string | null> {
  const orgs = await liveMemberships(db, userId);
  return orgs.find((o) => o.isDefault && o.ownerId === userId)?.orgKey ?? null;
}

/**
 * The organization a credential is being issued for: `orgKey` when it is one of the user's live
 * memberships, the default org when omitted (interface document: Tokens rules, Authentication 6).
 * 403 NO_ACCESS otherwise; 503 when memberships cannot be established.
 */
export async function resolveMemberOrg(
  db: Db,
  userId: string,
  orgKey: string | undefined,
): Promise<{ orgKey: string; role: Role }> {
  const key = orgKey ?? (await defaultOrgKey(db, userId));
  const role = key ? await liveRole(db, userId, key) : null;
  if (!key || !role) throw errorOf(COMMON_ERRORS, 'NO_ACCESS', 'you are not a member of this organization');
  return { orgKey: key, role };
}

/**
 * Membership revalidation for an svc_ credential (Authentication 5): the principal's role was read
 * live with the token, so a user who left the token's organization is refused with 403 on the very next
 * request. Sessions are not bound to an organization and pass. Mount after `auth.require()`.
 */
export const requireLiveCredential: RequestHandler = (req, _res, next) => {
  // req.principal, not principalOf: src/auth/principal.ts verifies grants through oauth/verify.ts, which
  // reads memberships here, so this file does not import it back.
  const principal = req.principal;
  if (!principal) throw invalidToken();
  if (principal.kind === 'api_token' && !principal.role) {
    throw errorOf(COMMON_ERRORS, 'NOT_A_MEMBER', 'the user does not belong to this organization');
  }
  next();
};
