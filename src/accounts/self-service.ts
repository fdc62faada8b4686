import { and, desc, eq, gt, isNull, ne, sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { oauthGrants, sessions, users } from '../db/schema.js';
import { grantOfEventColumns, recordGrantEvents } from '../audit/grants.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import type { Deps } from '../deps.js';
import { hashPassword, passwordProblem } from './password.js';
import { confirmPerson } from './reauthentication.js';
import { revokeCredentialsAfterPasswordChange, type CredentialRevocation } from './credential-revocation.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { accountEvent, revokedCounts } from '../audit/account-events.js';
import { transaction } from '../db/transaction.js';
import { ACCOUNT_ERRORS } from './errors.js';

// What a signed-in person manages about their own account: name, password, sessions
// and connected apps (OAuth grants). Each function acts only on the caller's own rows: every statement
// is keyed by the caller's user id, so a handle of someone else's session or grant matches nothing.

export async function changeName(db: Db, userId: string, name: string): Promise<void> {
  await db.update(users).set({ name }).where(eq(users.id, userId));
}

/**
 * CONTRACT §7: a password change signs out every session but the one that made it and revokes every
 * OAuth grant (revokeCredentialsAfterPasswordChange), in the transaction that sets the new password.
 * 400 WRONG_PASSWORD when the current password is not right (counted as a sign-in failure: 429 past the
 * limit); 400 WEAK_PASSWORD as at registration.
 */
export async function changePassword(
  deps: Deps,
  input: { userId: string; sessionId: string; current: string; next: string; origin: AuditOrigin },
): Promise<CredentialRevocation> {
  const db = deps.db;
  const [user] = await db.select().from(users).where(eq(users.id, input.userId));
  if (!user || user.deletedAt) throw errorOf(COMMON_ERRORS, 'INVALID_TOKEN', 'invalid token');
  // The current password counts like a sign-in attempt (./reauthentication.ts).
  await confirmPerson(deps, user, { password: input.current, secondFactor: false });
  const weak = passwordProblem(input.next);
  if (weak) throw errorOf(ACCOUNT_ERRORS, 'WEAK_PASSWORD', weak);
  const hash = await hashPassword(input.next);
  return transaction(db, async (t) => {
    await t.update(users).set({ passwordHash: hash }).where(eq(users.id, input.userId));
    const revoked = await revokeCredentialsAfterPasswordChange(t, input.userId, {
      origin: input.origin,
      keepSessionId: input.sessionId,
    });
    await recordAuditEvent(
      t,
      accountEvent(input.userId, 'account.password_changed', input.origin, revokedCounts(revoked)),
    );
    return revoked;
  });
}

export interface SessionView {
  id: string;
  createdAt: Date;
  expiresAt: Date;
}

/** The person's live sessions, newest first. */
export async function liveSessions(db: Db, userId: string): Promise<SessionView[]> {
  return db
    .select({ id: sessions.id, createdAt: sessions.createdAt, expiresAt: sessions.expiresAt })
    .from(sessions)
    .where(and(eq(sessions.userId, userId), isNull(sessions.revokedAt), gt(sessions.expiresAt, new Date())))
    .orderBy(desc(sessions.createdAt))
    .limit(100);
}

/** Signs out one of the person's sessions (by its public handle), or every one but `keep`. Returns how many. */
export async function signOutSessions(
  db: Db,
  userId: string,
  which: { sessionId: string } | { allBut: string },
  origin: AuditOrigin,
): Promise<number> {
  const target = 'sessionId' in which ? eq(sessions.id, which.sessionId) : ne(sessions.id, which.allBut);
  return transaction(db, async (tx) => {
    const rows = await tx
      .update(sessions)
      .set({ revokedAt: new Date() })
      .where(and(eq(sessions.userId, userId), isNull(sessions.revokedAt), target))
      .returning({ id: sessions.id });
    if (rows.length > 0)
      await recordAuditEvent(
        tx,
        accountEvent(userId, 'account.sessions_revoked', origin, { sessions: rows.map((r) => r.id) }),
      );
    return rows.length;
  });
}

export interface ConnectedApp {
  grantId: string;
  clientId: string;
  clientName: string | null;
  resource: string;
  orgName: string;
  connectedAt: Date;
  /** The newest of: the grant, its latest refresh, its latest billed model call. */
  lastUsedAt: Date;
}

/** The person's live OAuth grants (one per approved resource), newest first. */
export async function connectedApps(db: Db, userId: string): Promise<ConnectedApp[]> {
  const rows = await queryRows<{
    id: string;
    client_id: string;
    client_name: string | null;
    resource: string;
    org_name: string;
    created_at: string | Date;
    last_used: string | Date;
  }>(
    db,
    sql`select g.id, g.client_id, c.client_name, g.resource, o.name as org_name, g.created_at,
          greatest(g.created_at,
            (select max(r.created_at) from oauth_refresh_tokens r where r.grant_id = g.id),
            (select max(u.created_at) from usage_records u where u.oauth_grant_id = g.id and u.org_key = g.org)) as last_used
        from oauth_grants g
        join orgs o on o.id = g.org
        left join oauth_clients c on c.client_id = g.client_id
        where g.user_id = ${userId} and g.revoked_at is null
        order by g.created_at desc, g.id limit 200`,
  );
  return rows.map((r) => ({
    grantId: r.id,
    clientId: r.client_id,
    clientName: r.client_name,
    resource: r.resource,
    orgName: r.org_name,
    connectedAt: new Date(r.created_at),
    lastUsedAt: new Date(r.last_used),
  }));
}

/** Revokes one of the person's grants: its access tokens fail at once, its refresh tokens stop. */
export async function revokeConnectedApp(
  db: Db,
  userId: string,
  grantId: string,
  origin: AuditOrigin,
): Promise<boolean> {
  // One guarded update (STYLE: state that must not race): another person's grant, or one already revoked,
  // matches no row.
  return transaction(db, async (tx) => {
    const revoked = await tx
      .update(oauthGrants)
      .set({ revokedAt: new Date() })
      .where(and(eq(oauthGrants.id, grantId), eq(oauthGrants.userId, userId), isNull(oauthGrants.revokedAt)))
      .returning(grantOfEventColumns);
    await recordGrantEvents(tx, 'grant.revoked', revoked, origin, 'disconnected');
    return revoked.length > 0;
  });
}
