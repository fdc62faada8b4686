import { eq, isNull, and } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { users } from '../db/schema.js';
import { errorOf } from '../http/errors.js';
import { passwordResetMail } from '../mail/templates.js';
import { issueOneTimeToken, redeemOneTimeToken, retireOneTimeTokens } from './one-time-tokens.js';
import { hashPassword, passwordProblem } from './password.js';
import { revokeCredentialsAfterPasswordChange, type CredentialRevocation } from './credential-revocation.js';
import { findUserByEmail, normaliseEmail } from './users.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { accountEvent, revokedCounts } from '../audit/account-events.js';
import { transaction } from '../db/transaction.js';
import { ACCOUNT_ERRORS } from './errors.js';

// Password reset (CONTRACT §4): the request answers the same whatever the address; the token is
// single-use and lives 1 h; confirming sets the password and revokes every session and every OAuth
// grant of the user (CONTRACT §7: credential-revocation.ts).

export const RESET_REQUESTED_MESSAGE = 'if an account exists for this address, a reset link is on its way';

/**
 * Mails a reset link when the address has an account; otherwise does nothing visible. Requests are
 * limited per e-mail (5 an hour), counted for unknown addresses too so the limit reveals nothing.
 */
export async function requestPasswordReset(deps: Deps, email: string): Promise<void> {
  const address = normaliseEmail(email);
  const key = `reset:${address}`;
  await deps.limits.resetRequests.check(key);
  await deps.limits.resetRequests.fail(key);
  const user = await findUserByEmail(deps.db, address);
  if (!user) return;
  const token = await issueOneTimeToken(deps.db, deps.keys.hmac, user.id, 'reset_password');
  const link = `${deps.config.v2Url}/account/reset?token=${encodeURIComponent(token)}`;
  try {
    await deps.mailer.send(passwordResetMail(user.email, user.name, link));
  } catch (err) {
    // The answer must not differ for a known address: log, never surface.
    deps.log.warn({ err: (err as Error).message, userId: user.id }, 'reset mail not sent');
  }
}

const invalidResetToken = () =>
  errorOf(ACCOUNT_ERRORS, 'INVALID_RESET_TOKEN', 'this reset link is invalid, used or expired');

/**
 * Sets a new password from a reset token. The password rule is checked before the token is spent, so
 * a weak choice does not burn the link. In one transaction: the token is redeemed, the other reset
 * links are retired, the password changes and every session and OAuth grant is revoked (svc_ tokens
 * stay; the answer counts them). Receiving the mail proves
 * the address, so an unverified account becomes verified.
 */
export async function confirmPasswordReset(
  deps: Deps,
  input: { token: string; password: string; origin: AuditOrigin },
): Promise<{ userId: string; revoked: CredentialRevocation }> {
  const problem = passwordProblem(input.password);
  if (problem) throw errorOf(ACCOUNT_ERRORS, 'WEAK_PASSWORD', problem);
  const passwordHash = await hashPassword(input.password);
  const outcome = await transaction(deps.db, async (tx) => {
    const db = tx;
    const owner = await redeemOneTimeToken(db, deps.keys.hmac, input.token, 'reset_password');
    if (!owner) return null;
    await retireOneTimeTokens(db, owner, 'reset_password');
    await db.update(users).set({ passwordHash }).where(eq(users.id, owner));
    await db
      .update(users)
      .set({ emailVerifiedAt: new Date() })
      .where(and(eq(users.id, owner), isNull(users.emailVerifiedAt)));
    const revoked = await revokeCredentialsAfterPasswordChange(db, owner, { origin: input.origin });
    await recordAuditEvent(
      db,
      accountEvent(owner, 'account.password_reset', input.origin, revokedCounts(revoked), 'self'),
    );
    return { userId: owner, revoked };
  });
  if (!outcome) throw invalidResetToken();
  const { userId } = outcome;
  const [user] = await deps.db.select({ email: users.email }).from(users).where(eq(users.id, userId));
  // A new password starts a fresh count of sign-in failures.
  if (user) await deps.limits.loginFailures.reset(user.email);
  return outcome;
}
