import { randomBytes } from 'node:crypto';
import { and, count, desc, eq, gt, isNull, sql, type SQL } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import type { Db } from '../db/client.js';
import { memberships, orgInvitations, orgs, users, type Role } from '../db/schema.js';
import { AppError, errorOf, COMMON_ERRORS } from '../http/errors.js';
import { unknownCursor, type Page } from '../http/pagination.js';
import { hmacSecret } from '../crypto/hash.js';
import { newId } from '../ids.js';
import { normaliseEmail } from '../accounts/users.js';
import { canonicalMailbox } from '../accounts/trial-addresses.js';
import { invitationMail } from '../mail/invitation-mail.js';
import { memberAdded, type OrgRow } from './service.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { transaction } from '../db/transaction.js';
import { ORG_ERRORS } from './errors.js';

// Invitations by e-mail (docs/orgs-tokens-device.md "Invitations"). POST …/members adds
// only a registered, live account (interface document: Team membership); an invitation is how an owner
// asks someone who has no account yet. It is its own resource: a secret link mailed to the address
// (stored as its HMAC only), single-use, expiring after INVITATION_TTL_DAYS, revocable by the owner, and
// accepted only by a signed-in, verified account with the address it was sent to. Wrong tokens count
// against the person trying them (deps.limits.invitationFailures), like wrong device codes.

export const INVITATION_TTL_DAYS = 7;
/** Open invitations one organization may have at once: a bound on the mail an owner can make us send. */
export const MAX_OPEN_INVITATIONS = 50;
const TOKEN_SHAPE = /^[A-Za-z0-9_-]{43}$/;
/** The page an invitation's link opens (src/portal/invitation-pages.ts). */
export const INVITATION_ACCEPT_PATH = '/account/invitations/accept';

export type InvitationRow = typeof orgInvitations.$inferSelect;
export type InvitationStatus = 'pending' | 'accepted' | 'revoked' | 'expired';
export type InvitableRole = Exclude<Role, 'owner'>;

export function invitationStatus(row: InvitationRow, now = new Date()): InvitationStatus {
  if (row.acceptedAt) return 'accepted';
  if (row.revokedAt) return 'revoked';
  return row.expiresAt <= now ? 'expired' : 'pending';
}

const openOf = (orgKey: string) =>
  and(
    eq(orgInvitations.orgId, orgKey),
    isNull(orgInvitations.acceptedAt),
    isNull(orgInvitations.revokedAt),
    gt(orgInvitations.expiresAt, new Date()),
  );

/**
 * Counts one invitation mail against the inviter's and the recipient mailbox's budgets (docs/limits.md §
 * Invitation mail), all checked before any is spent; 429 RATE_LIMITED with Retry-After over any. Counted
 * when sent, so revoking or replacing an invitation gives nothing back.
 */
async function countInvitationMail(deps: Deps, inviterId: string, email: string): Promise<void> {
  const mailbox = canonicalMailbox(email);
  const budgets = [
    [deps.limits.invitationsPerInviter, inviterId],
    [deps.limits.invitationsPerAddressHour, mailbox],
    [deps.limits.invitationsPerAddressDay, mailbox],
  ] as const;
  for (const [limiter, key] of budgets) await limiter.check(key);
  for (const [limiter, key] of budgets) await limiter.fail(key);
}

/**
 * Invites `email` into the org with `role`, and mails the link. An open invitation for the same address
 * is replaced (its link stops working): "send again" is inviting again. 409 ALREADY_MEMBER when an
 * account with that address already belongs to the org; 409 TOO_MANY_INVITATIONS past the bound.
 */
export async function createInvitation(
  deps: Deps,
  org: OrgRow,
  inviter: { userId: string; name: string },
  rawEmail: string,
  role: InvitableRole,
  origin: AuditOrigin,
): Promise<InvitationRow> {
  const email = normaliseEmail(rawEmail);
  const [member] = await deps.db
    .select({ userId: memberships.userId })
    .from(memberships)
    .innerJoin(users, eq(users.id, memberships.userId))
    .where(and(eq(memberships.orgId, org.id), eq(users.email, email)));
  if (member) throw errorOf(ORG_ERRORS, 'ALREADY_MEMBER', 'this account is already a member of the client');
  const [open] = await deps.db.select({ n: count() }).from(orgInvitations).where(openOf(org.id));
  if ((open?.n ?? 0) >= MAX_OPEN_INVITATIONS)
    throw errorOf(
      ORG_ERRORS,
      'TOO_MANY_INVITATIONS',
      `at most ${MAX_OPEN_INVITATIONS} invitations can be open at once; revoke some first`,
    );

  await countInvitationMail(deps, inviter.userId, email);

  const token = randomBytes(32).toString('base64url');
  let row: InvitationRow;
  try {
    row = await transaction(deps.db, async (tx) => {
      // The open invitation for this address, expired or not, gives way (one open per address: index).
      const replaced = await tx
        .update(orgInvitations)
        .set({ revokedAt: new Date() })
        .where(
          and(
            eq(orgInvitations.orgId, org.id),
            eq(orgInvitations.email, email),
            isNull(orgInvitations.acceptedAt),
            isNull(orgInvitations.revokedAt),
          ),
        )
        .returning({ id: orgInvitations.id });
      for (const old of replaced)
        await recordInvitationEvent(tx, origin, 'invitation.revoked', org.id, old.id, { reason: 'replaced' });
      const issuedAt = new Date();
      const [created] = await tx
        .insert(orgInvitations)
        .values({
          id: newId('inv'),
          orgId: org.id,
          email,
          role,
          tokenHash: hmacSecret(deps.keys.hmac, token),
          invitedBy: inviter.userId,
          // Both from one instant, so expires_at is created_at + 7 days to the second: the column's default
          // (the transaction's start) could fall just before a second's boundary and this clock read just
          // after, one second apart once rounded (seen in CI, test/orgs-people).
          createdAt: issuedAt,
          expiresAt: new Date(issuedAt.getTime() + INVITATION_TTL_DAYS * 24 * 3600 * 1000),
        })
        .returning();
      await recordInvitationEvent(tx, origin, 'invitation.sent', org.id, created!.id, { email, role });
      return created!;
    });
  } catch (err) {
    // Two invitations of the same address at the same moment: the index keeps one.
    if ((err as { code?: string }).code === '23505') throw errorOf(ORG_ERRORS, 'INVITATION_PENDING');
    throw err;
  }
  await mailInvitation(deps, org, inviter.name, row, token);
  return row;
}

async function mailInvitation(
  deps: Deps,
  org: OrgRow,
  inviterName: string,
  row: InvitationRow,
  token: string,
): Promise<void> {
  const link = `${deps.config.v2Url}${INVITATION_ACCEPT_PATH}?token=${encodeURIComponent(token)}`;
  await deps.mailer.send(
    invitationMail({
      to: row.email,
      inviterName,
      orgName: org.name,
      role: row.role,
      link,
      expiresInDays: INVITATION_TTL_DAYS,
    }),
  );
}

/**
 * Sends an open invitation again: a new link (the one mailed before stops working) valid for
 * INVITATION_TTL_DAYS from now, the same id, address and role. Bounded per invitation (3 re-sends) and
 * per organization (20 a day), besides the bounds every invitation mail counts against (inviter,
 * mailbox): 429 RATE_LIMITED with Retry-After past any, and no mail (docs/limits.md § Invitation mail).
 * Another org's id is 404 like an unknown one; an accepted one 409 INVITATION_USED; a revoked or expired
 * one 410 (invite again instead).
 */
export async function resendInvitation(
  deps: Deps,
  org: OrgRow,
  sender: { userId: string; name: string },
  invitationId: string,
  origin: AuditOrigin,
): Promise<InvitationRow> {
  const [found] = await deps.db
    .select()
    .from(orgInvitations)
    .where(and(eq(orgInvitations.id, invitationId), eq(orgInvitations.orgId, org.id)));
  if (!found) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such invitation');
  const status = invitationStatus(found);
  if (status !== 'pending') throw refusal(status);

  const perInvitation = deps.limits.invitationResendsPerInvitation;
  const perOrg = deps.limits.invitationResendsPerOrg;
  await perInvitation.check(found.id);
  await perOrg.check(org.id);
  await countInvitationMail(deps, sender.userId, found.email);
  await perInvitation.fail(found.id);
  await perOrg.fail(org.id);

  const token = randomBytes(32).toString('base64url');
  const row = await transaction(deps.db, async (tx) => {
    const now = new Date();
    const [renewed] = await tx
      .update(orgInvitations)
      .set({
        tokenHash: hmacSecret(deps.keys.hmac, token),
        expiresAt: new Date(now.getTime() + INVITATION_TTL_DAYS * 24 * 3600 * 1000),
      })
      .where(and(eq(orgInvitations.id, found.id), openOf(org.id)))
      .returning();
    if (renewed)
      await recordInvitationEvent(tx, origin, 'invitation.sent', org.id, renewed.id, {
        email: renewed.email,
        role: renewed.role,
        resent: true,
      });
    return renewed;
  });
  if (!row) {
    // Accepted, revoked or expired between the read and the update: say which.
    const [now] = await deps.db.select().from(orgInvitations).where(eq(orgInvitations.id, found.id));
    const state = now ? invitationStatus(now) : 'revoked';
    throw refusal(state === 'pending' ? 'revoked' : state);
  }
  await mailInvitation(deps, org, sender.name, row, token);
  return row;
}

/**
 * The org's invitations, newest first (created_at, then id: org_invitations_org_idx's order), one page
 * (CONTRACT §3), every status. `startingAfter` is an invitation of this org (`inv_…`); 400 when not.
 */
export async function listInvitations(db: Db, orgKey: string, page: Page): Promise<InvitationRow[]> {
  const conditions: SQL[] = [eq(orgInvitations.orgId, orgKey)];
  if (page.startingAfter !== undefined) {
    const [c] = await db
      .select({ id: orgInvitations.id })
      .from(orgInvitations)
      .where(and(eq(orgInvitations.id, page.startingAfter), eq(orgInvitations.orgId, orgKey)));
    if (!c) throw unknownCursor();
    // Its time read by the statement itself (a JS Date would drop PostgreSQL's microseconds), as the
    // projects list does (projects/queries.ts).
    conditions.push(
      sql`(${orgInvitations.createdAt}, ${orgInvitations.id}) < ((select c.created_at from org_invitations c where c.id = ${c.id}), ${c.id})`,
    );
  }
  return db
    .select()
    .from(orgInvitations)
    .where(and(...conditions))
    .orderBy(desc(orgInvitations.createdAt), desc(orgInvitations.id))
    .limit(page.limit)
    .offset(page.offset);
}

/** The org's open invitations (the members page lists these). */
export async function openInvitations(db: Db, orgKey: string): Promise<InvitationRow[]> {
  return db.select().from(orgInvitations).where(openOf(orgKey)).orderBy(desc(orgInvitations.createdAt));
}

/**
 * Revokes an invitation of this org: its link stops working at once. Revoking one already revoked or
 * expired changes nothing and answers the same; an accepted one is 409 INVITATION_USED (remove the
 * member instead); another org's id is 404 like an unknown one.
 */
export async function revokeInvitation(
  db: Db,
  orgKey: string,
  invitationId: string,
  origin: AuditOrigin,
): Promise<InvitationRow> {
  const revoked = await transaction(db, async (tx) => {
    const [row] = await tx
      .update(orgInvitations)
      .set({ revokedAt: new Date() })
      .where(
        and(
          eq(orgInvitations.id, invitationId),
          eq(orgInvitations.orgId, orgKey),
          isNull(orgInvitations.acceptedAt),
          isNull(orgInvitations.revokedAt),
        ),
      )
      .returning();
    if (row)
      await recordInvitationEvent(tx, origin, 'invitation.revoked', orgKey, row.id, { email: row.email });
    return row;
  });
  if (revoked) return revoked;
  const [row] = await db
    .select()
    .from(orgInvitations)
    .where(and(eq(orgInvitations.id, invitationId), eq(orgInvitations.orgId, orgKey)));
  if (!row) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such invitation');
  if (row.acceptedAt)
    throw errorOf(ORG_ERRORS, 'INVITATION_USED', 'this invitation was accepted; remove the member instead');
  return row;
}

export interface InvitationView {
  invitation: InvitationRow;
  status: InvitationStatus;
  orgName: string;
  inviterName: string;
}

/**
 * The invitation a token opens (for the page that shows it before accepting), or null for a token that
 * opens none (malformed, unknown, or of a deleted organization). Does not count a failure: the page
 * shows the invitation only to a person the per-address limit lets through, and accepting counts.
 */
export async function invitationByToken(deps: Deps, token: string): Promise<InvitationView | null> {
  if (!TOKEN_SHAPE.test(token)) return null;
  const [row] = await deps.db
    .select({ invitation: orgInvitations, orgName: orgs.name, inviterName: users.name })
    .from(orgInvitations)
    .innerJoin(orgs, eq(orgs.id, orgInvitations.orgId))
    .innerJoin(users, eq(users.id, orgInvitations.invitedBy))
    .where(and(eq(orgInvitations.tokenHash, hmacSecret(deps.keys.hmac, token)), isNull(orgs.deletedAt)));
  return row ? { ...row, status: invitationStatus(row.invitation) } : null;
}

/** Why an invitation that exists cannot be accepted (the holder of its link may know its state). */
export function refusal(status: Exclude<InvitationStatus, 'pending'>): AppError {
  if (status === 'accepted')
    return errorOf(ORG_ERRORS, 'INVITATION_USED', 'this invitation has already been accepted');
  if (status === 'revoked') return errorOf(ORG_ERRORS, 'INVITATION_REVOKED');
  return errorOf(ORG_ERRORS, 'INVITATION_EXPIRED');
}

/**
 * Accepts an invitation for the signed-in account: one guarded UPDATE consumes it (of two racing
 * accepts exactly one wins) and the membership is made in the same transaction, with the invited role.
 * 404 INVITATION_NOT_FOUND for a token that opens nothing (counted: 10 in 10 min per person → 429);
 * 409/410 for one used, revoked or expired; 403 INVITATION_FOR_ANOTHER_EMAIL when the account's
 * address is not the one invited (the link proves the mailbox, the account must be that mailbox's);
 * 409 ALREADY_MEMBER, leaving the invitation open.
 */
export async function acceptInvitation(
  deps: Deps,
  user: { userId: string; email: string },
  token: string,
  origin: AuditOrigin,
): Promise<{ orgKey: string; orgName: string; role: Role }> {
  const limiter = deps.limits.invitationFailures;
  await limiter.check(user.userId);
  const found = await invitationByToken(deps, token);
  if (!found) {
    await limiter.fail(user.userId);
    throw errorOf(ORG_ERRORS, 'INVITATION_NOT_FOUND', 'this invitation link is not valid');
  }
  if (found.status !== 'pending') throw refusal(found.status);
  if (found.invitation.email !== normaliseEmail(user.email))
    throw errorOf(
      ORG_ERRORS,
      'INVITATION_FOR_ANOTHER_EMAIL',
      'this invitation was sent to another e-mail address; sign in with that address to accept it',
    );
  const { invitation } = found;
  return transaction(deps.db, async (tx) => {
    const [taken] = await tx
      .update(orgInvitations)
      .set({ acceptedAt: new Date(), acceptedBy: user.userId })
      .where(
        and(
          eq(orgInvitations.id, invitation.id),
          isNull(orgInvitations.acceptedAt),
          isNull(orgInvitations.revokedAt),
          gt(orgInvitations.expiresAt, new Date()),
        ),
      )
      .returning();
    if (!taken) throw refusal('accepted');
    const [member] = await tx
      .insert(memberships)
      .values({ orgId: invitation.orgId, userId: user.userId, role: invitation.role })
      .onConflictDoNothing()
      .returning();
    if (!member) throw errorOf(ORG_ERRORS, 'ALREADY_MEMBER', 'you are already a member of this organization');
    await recordInvitationEvent(tx, origin, 'invitation.accepted', invitation.orgId, invitation.id, {
      role: member.role,
    });
    await recordAuditEvent(tx, {
      orgKey: invitation.orgId,
      ...memberAdded(user.userId, member.role, invitation.id),
      origin,
    });
    return { orgKey: invitation.orgId, orgName: found.orgName, role: member.role };
  });
}

/** Records an invitation's audit event (CONTRACT §11): its id and address, never its link or token. */
const recordInvitationEvent = (
  tx: Db,
  origin: AuditOrigin,
  action: 'invitation.sent' | 'invitation.accepted' | 'invitation.revoked',
  orgKey: string,
  invitationId: string,
  details: Record<string, unknown>,
) =>
  recordAuditEvent(tx, { orgKey, action, target: { type: 'invitation', id: invitationId }, details, origin });
