import { randomBytes } from 'node:crypto';
import { and, eq, gt, isNull, lt, sql } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { twoFactorChallenges, users } from '../db/schema.js';
import { errorOf } from '../http/errors.js';
import { hmacSecret } from '../crypto/hash.js';
import { issueSession } from '../auth/session.js';
import { decoyHash, verifyPassword } from './password.js';
import { findUserByEmail, normaliseEmail, type UserRow } from './users.js';
import { acceptSecondFactor, invalidCode } from './two-factor.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { accountEvent } from '../audit/account-events.js';
import { transaction } from '../db/transaction.js';
import { ACCOUNT_ERRORS } from './errors.js';

// Signing in (CONTRACT §4). A wrong e-mail and a wrong password give the same 401 INVALID_CREDENTIALS
// after the same work (an unknown e-mail is checked against a decoy hash). Failures are limited per
// e-mail, whatever the address they come from (CONTRACT §1). With 2FA on, the password step yields a
// challenge (5 minutes, 5 wrong codes burn it) instead of a session.

export const CHALLENGE_TTL_SECONDS = 5 * 60;
export const CHALLENGE_MAX_FAILURES = 5;

export type LoginResult =
  | { kind: 'session'; token: string; user: UserRow }
  | { kind: 'challenge'; challengeToken: string; email: string };

const invalidCredentials = () =>
  errorOf(ACCOUNT_ERRORS, 'INVALID_CREDENTIALS', 'e-mail or password is not correct');
const invalidChallenge = () =>
  errorOf(
    ACCOUNT_ERRORS,
    'INVALID_CHALLENGE',
    'this sign-in attempt is unknown, expired or used up; sign in again',
  );

export async function loginWithPassword(
  deps: Deps,
  input: { email: string; password: string; origin: AuditOrigin },
): Promise<LoginResult> {
  const email = normaliseEmail(input.email);
  await deps.limits.loginFailures.check(email);
  const user = await findUserByEmail(deps.db, email);
  const ok = await verifyPassword(user?.passwordHash ?? (await decoyHash()), input.password);
  if (!user || !ok) {
    await deps.limits.loginFailures.fail(email);
    // A person's log hears of a wrong password for their address; an unknown address has no log.
    if (user)
      await recordAuditEvent(
        deps.db,
        accountEvent(user.id, 'account.sign_in_failed', input.origin, { reason: 'wrong_password' }, user),
      );
    throw invalidCredentials();
  }
  await deps.limits.loginFailures.reset(email);
  if (user.totpEnabledAt) {
    const challengeToken = randomBytes(32).toString('base64url');
    // Sweep this user's long-dead challenges (bounded table, no timer).
    await deps.db
      .delete(twoFactorChallenges)
      .where(
        and(
          eq(twoFactorChallenges.userId, user.id),
          lt(twoFactorChallenges.expiresAt, new Date(Date.now() - 3600 * 1000)),
        ),
      );
    await deps.db.insert(twoFactorChallenges).values({
      tokenHash: hmacSecret(deps.keys.hmac, challengeToken),
      userId: user.id,
      expiresAt: new Date(Date.now() + CHALLENGE_TTL_SECONDS * 1000),
    });
    return { kind: 'challenge', challengeToken, email: user.email };
  }
  const session = await signedIn(deps, user, 'password', input.origin);
  return { kind: 'session', token: session.token, user };
}

/**
 * The second step: a current TOTP code or an unused recovery code. A wrong code counts against the
 * challenge (the fifth burns it) and against the user's 2FA failure limit, which spans challenges so
 * that starting new sign-ins does not buy more guesses. The challenge is consumed by one guarded
 * UPDATE, so a challenge yields at most one session.
 */
export async function completeTwoFactorLogin(
  deps: Deps,
  input: { challengeToken: string; code: string; origin: AuditOrigin },
): Promise<{ token: string; user: UserRow }> {
  const tokenHash = hmacSecret(deps.keys.hmac, input.challengeToken);
  const live = and(
    eq(twoFactorChallenges.tokenHash, tokenHash),
    isNull(twoFactorChallenges.consumedAt),
    gt(twoFactorChallenges.expiresAt, new Date()),
    lt(twoFactorChallenges.failedAttempts, CHALLENGE_MAX_FAILURES),
  );
  const [challenge] = await deps.db.select().from(twoFactorChallenges).where(live);
  if (!challenge) throw invalidChallenge();
  const [user] = await deps.db.select().from(users).where(eq(users.id, challenge.userId));
  if (!user || !user.totpEnabledAt) throw invalidChallenge();
  await deps.limits.twoFactorFailures.check(user.id);

  const outcome = await acceptSecondFactor(deps, user, input.code);
  if (outcome !== 'accepted') {
    await deps.db
      .update(twoFactorChallenges)
      .set({ failedAttempts: sql`${twoFactorChallenges.failedAttempts} + 1` })
      .where(eq(twoFactorChallenges.id, challenge.id));
    await deps.limits.twoFactorFailures.fail(user.id);
    await recordAuditEvent(
      deps.db,
      accountEvent(user.id, 'account.sign_in_failed', input.origin, { reason: 'wrong_code' }, user),
    );
    throw invalidCode(401, outcome);
  }
  const [won] = await deps.db
    .update(twoFactorChallenges)
    .set({ consumedAt: new Date() })
    .where(and(eq(twoFactorChallenges.id, challenge.id), live))
    .returning({ id: twoFactorChallenges.id });
  if (!won) throw invalidChallenge();
  await deps.limits.twoFactorFailures.reset(user.id);
  const session = await signedIn(deps, user, 'password_and_2fa', input.origin);
  return { token: session.token, user };
}

/** A new session and its `account.signed_in` event (CONTRACT §11), in one transaction. */
function signedIn(deps: Deps, user: UserRow, method: string, origin: AuditOrigin) {
  return transaction(deps.db, async (tx) => {
    const session = await issueSession(tx, deps.keys.session, user.id);
    await recordAuditEvent(
      tx,
      accountEvent(user.id, 'account.signed_in', origin, { method, session_id: session.sessionId }, user),
    );
    return session;
  });
}
