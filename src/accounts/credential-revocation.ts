import { and, eq, isNull, ne, sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import {
  apiTokens,
  deviceCodes,
  oauthCodes,
  oauthGrants,
  sessions,
  twoFactorChallenges,
} from '../db/schema.js';
import { grantOfEventColumns, recordGrantEvents } from '../audit/grants.js';
import type { AuditOrigin } from '../audit/context.js';

// What a new password takes back (CONTRACT §7, last point). Whoever knew the old
// password may have signed in, approved an app or started a device login; a new password must end all
// of it, or the account is not taken back:
//   - sessions: every one after a reset; after a change, every one but the session that made it;
//   - OAuth grants of every client, svc-cli included (their access tokens fail the verifier's revocation
//     check at once, their refresh tokens stop refreshing), and what would become a grant or a token
//     later: unredeemed authorization codes and device approvals not yet collected by a poll;
//   - open 2FA challenges (the old password got past the first step).
// `svc_` API tokens stay: scripts and CI depend on them. The confirmation tells how many are active
// and how to revoke them (passwordChangeConfirmation).

export interface CredentialRevocation {
  sessionsRevoked: number;
  grantsRevoked: number;
  /** API tokens still active after the change: the confirmation names this count. */
  activeApiTokens: number;
}

/**
 * Revokes what a new password must take back. Runs in the caller's transaction when `db` is one (the
 * reset confirmation and the portal's change-password route set the password in the same transaction).
 * `keepSessionId` is the public handle (ses_…) of the session that changed the password; a reset keeps
 * none. `origin`: who changed the password, for the revoked grants' audit events.
 */
export async function revokeCredentialsAfterPasswordChange(
  db: Db,
  userId: string,
  options: { origin: AuditOrigin; keepSessionId?: string },
): Promise<CredentialRevocation> {
  const now = new Date();
  const keep = options.keepSessionId;
  const revokedSessions = await db
    .update(sessions)
    .set({ revokedAt: now })
    .where(
      and(eq(sessions.userId, userId), isNull(sessions.revokedAt), keep ? ne(sessions.id, keep) : undefined),
    )
    .returning({ id: sessions.id });
  const revokedGrants = await db
    .update(oauthGrants)
    .set({ revokedAt: now })
    .where(and(eq(oauthGrants.userId, userId), isNull(oauthGrants.revokedAt)))
    .returning(grantOfEventColumns);
  await recordGrantEvents(db, 'grant.revoked', revokedGrants, options.origin, 'password_changed');
  // A code not yet exchanged would mint a fresh grant: spend it.
  await db
    .update(oauthCodes)
    .set({ usedAt: now })
    .where(and(eq(oauthCodes.userId, userId), isNull(oauthCodes.usedAt)));
  // An approval not yet collected would hand out a grant or an svc_ token: deny it.
  await db
    .update(deviceCodes)
    .set({ status: 'denied', decidedAt: now })
    .where(
      and(eq(deviceCodes.userId, userId), eq(deviceCodes.status, 'approved'), isNull(deviceCodes.consumedAt)),
    );
  await db
    .update(twoFactorChallenges)
    .set({ consumedAt: now })
    .where(and(eq(twoFactorChallenges.userId, userId), isNull(twoFactorChallenges.consumedAt)));
  const [tokens] = await db
    .select({ active: sql<number>`count(*)::int` })
    .from(apiTokens)
    .where(and(eq(apiTokens.userId, userId), isNull(apiTokens.revokedAt)));
  return {
    sessionsRevoked: revokedSessions.length,
    grantsRevoked: revokedGrants.length,
    activeApiTokens: tokens?.active ?? 0,
  };
}

export const API_TOKENS_STAY_HINT =
  'API tokens (svc_…) keep working. List them with GET /v1/tokens or on your account page, and revoke any you do not trust with POST /v1/tokens/revoke {id} or the Revoke button there.';

/** The JSON confirmation of a reset or change: what was revoked, and the svc_ tokens that were not. */
export function passwordChangeConfirmation(kind: 'reset' | 'change', revoked: CredentialRevocation) {
  const sessionsText =
    kind === 'reset' ? 'every session was signed out' : 'every other session was signed out';
  return {
    message: `password changed; ${sessionsText} and every app you had connected (OAuth) was disconnected`,
    revoked: { sessions: revoked.sessionsRevoked, oauth_grants: revoked.grantsRevoked },
    api_tokens: { active: revoked.activeApiTokens, message: API_TOKENS_STAY_HINT },
  };
}
