import { eq } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { users } from '../db/schema.js';
import { errorOf } from '../http/errors.js';
import { verificationMail } from '../mail/templates.js';
import { issueOneTimeToken, redeemOneTimeToken } from './one-time-tokens.js';
import { registerAccount, type OrgRow, type RegisterInput, type UserRow } from './users.js';
import { trialUsedBefore } from './trial-addresses.js';
import { ACCOUNT_ERRORS } from './errors.js';

// Registration and e-mail verification (CONTRACT §4): a mail with {V2_URL}/account/verify?token=…,
// single-use, 24 h. Until verified, auth.require answers 403 EMAIL_NOT_VERIFIED on every route but
// logout, resend and 2FA status; signing in itself is allowed so that the user can ask for a new mail.

/**
 * Issues a verification token and mails its link. `invitation`: the link of the invitation the person
 * registered from, carried on in the verification link so the verification page leads straight on to it
 * (the same mailbox received both, so the mail reveals nothing new).
 */
export async function sendVerificationMail(
  deps: Deps,
  user: Pick<UserRow, 'id' | 'email' | 'name'>,
  opts: { invitation?: string } = {},
): Promise<void> {
  const token = await issueOneTimeToken(deps.db, deps.keys.hmac, user.id, 'verify_email');
  const then = opts.invitation ? `&invitation=${encodeURIComponent(opts.invitation)}` : '';
  const link = `${deps.config.v2Url}/account/verify?token=${encodeURIComponent(token)}${then}`;
  await deps.mailer.send(verificationMail(user.email, user.name, link));
}

/**
 * Creates the account and its default client (with the domain hooks: the trial grant), then sends the
 * verification mail. A mail that cannot be sent does not undo the account: it is logged and the user
 * can ask for another (POST /v1/email/verify/resend).
 */
export async function registerAndNotify(
  deps: Deps,
  input: RegisterInput,
  opts: { invitation?: string } = {},
): Promise<{ user: UserRow; org: OrgRow }> {
  const created = await registerAccount(deps.db, input, deps.hooks.accountCreated, {
    trialUsedBefore: (tx, email) => trialUsedBefore(tx, deps.keys.hmac, email),
  });
  try {
    await sendVerificationMail(deps, created.user, opts);
  } catch (err) {
    deps.log.warn({ err: (err as Error).message, userId: created.user.id }, 'verification mail not sent');
  }
  return created;
}

/** Redeems a verification token; 400 INVALID_VERIFICATION_TOKEN when unknown, used or expired. */
export async function verifyEmail(deps: Deps, token: string): Promise<UserRow> {
  const userId = await redeemOneTimeToken(deps.db, deps.keys.hmac, token, 'verify_email');
  if (!userId)
    throw errorOf(
      ACCOUNT_ERRORS,
      'INVALID_VERIFICATION_TOKEN',
      'this verification link is invalid, used or expired',
    );
  const [user] = await deps.db.select().from(users).where(eq(users.id, userId));
  if (!user)
    throw errorOf(
      ACCOUNT_ERRORS,
      'INVALID_VERIFICATION_TOKEN',
      'this verification link is invalid, used or expired',
    );
  if (user.emailVerifiedAt) return user;
  const [updated] = await deps.db
    .update(users)
    .set({ emailVerifiedAt: new Date() })
    .where(eq(users.id, userId))
    .returning();
  return updated ?? user;
}

/**
 * Sends a fresh verification mail to a signed-in, unverified user. Counted like reset requests
 * (5 an hour per account) so the outbox cannot be used to flood an inbox.
 */
export async function resendVerification(deps: Deps, userId: string): Promise<{ sent: boolean }> {
  const [user] = await deps.db.select().from(users).where(eq(users.id, userId));
  if (!user || user.emailVerifiedAt) return { sent: false };
  const key = `verify:${user.id}`;
  await deps.limits.resetRequests.check(key);
  await deps.limits.resetRequests.fail(key);
  await sendVerificationMail(deps, user);
  return { sent: true };
}
