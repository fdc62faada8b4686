import type { Deps } from '../deps.js';
import { errorOf } from '../http/errors.js';
import { verifyPassword } from './password.js';
import { acceptSecondFactor } from './two-factor.js';
import { normaliseEmail, type UserRow } from './users.js';
import { ACCOUNT_ERRORS } from './errors.js';

// Asking a signed-in person for their password again (a password change, account deletion; docs/accounts.md
// § Re-entering the password). A stolen session must not become a password oracle:
//   - every wrong answer counts in the sign-in limiter of the person's e-mail (CONTRACT §1), so guesses here
//     and at /v1/login share one budget of 10 in 15 minutes; the routes carry the per-address limit too;
//   - with 2FA on, the password and the code are checked together and any failure is one answer
//     (WRONG_PASSWORD_OR_CODE), counted in both the sign-in and the 2FA limiters alike, so neither the
//     answer nor a limiter tells a right password with a wrong code from a wrong password. The code is
//     tried only when the password is right, so a mistyped password does not spend a good code.
//     A missing code is CODE_REQUIRED before the password is looked at: that answer is the same for
//     every password.

export const wrongPassword = () => errorOf(ACCOUNT_ERRORS, 'WRONG_PASSWORD', 'the password is not right');
export const wrongPasswordOrCode = () =>
  errorOf(ACCOUNT_ERRORS, 'WRONG_PASSWORD_OR_CODE', 'the password or the code is not right');
export const codeRequired = () =>
  errorOf(ACCOUNT_ERRORS, 'CODE_REQUIRED', 'enter a code from your authenticator app or a recovery code');

/**
 * Confirms the person behind a session: their password and, with 2FA on (`secondFactor`), a TOTP or
 * recovery code. Throws 400 WRONG_PASSWORD (2FA off), 400 WRONG_PASSWORD_OR_CODE (2FA on), 400
 * CODE_REQUIRED, or 429 RATE_LIMITED once the person's failures reach the sign-in limit.
 */
export async function confirmPerson(
  deps: Deps,
  user: UserRow,
  input: { password: string; code?: string; secondFactor: boolean },
): Promise<void> {
  const email = normaliseEmail(user.email);
  const twoFactor = input.secondFactor && user.totpEnabledAt !== null;
  await deps.limits.loginFailures.check(email);
  if (twoFactor) {
    await deps.limits.twoFactorFailures.check(user.id);
    if (!input.code) throw codeRequired();
  }
  const passwordRight = await verifyPassword(user.passwordHash, input.password);
  const confirmed =
    passwordRight && (!twoFactor || (await acceptSecondFactor(deps, user, input.code!)) === 'accepted');
  if (!confirmed) {
    await deps.limits.loginFailures.fail(email);
    if (twoFactor) await deps.limits.twoFactorFailures.fail(user.id);
    throw twoFactor ? wrongPasswordOrCode() : wrongPassword();
  }
  // As after a sign-in: the person proved themselves, their failure count starts again.
  await deps.limits.loginFailures.reset(email);
  if (twoFactor) await deps.limits.twoFactorFailures.reset(user.id);
}
