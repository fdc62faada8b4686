import { and, count, eq, isNull, lt, or } from 'drizzle-orm';
import { generateSecret, generateURI, verify } from 'otplib';
import type { Deps } from '../deps.js';
import type { Db } from '../db/client.js';
import { recoveryCodes, users } from '../db/schema.js';
import { errorOf, errorWithStatus, COMMON_ERRORS } from '../http/errors.js';
import { decrypt, encrypt, hmacSecret } from '../crypto/hash.js';
import { randomToken } from '../ids.js';
import type { UserRow } from './users.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import { accountEvent } from '../audit/account-events.js';
import { transaction } from '../db/transaction.js';
import { ACCOUNT_ERRORS } from './errors.js';

// TOTP two-factor authentication (CONTRACT §4): SHA-1, 6 digits, 30 s, ±1 step, a step already used is
// refused; ten one-time recovery codes at enable. The TOTP seed must be read back to check codes, so it
// is encrypted at rest (AES-256-GCM with deps.keys.encryption); recovery codes are HMACs only.

export const TOTP_ISSUER = 'svc';
export const RECOVERY_CODE_COUNT = 10;

/** What became of a code: taken, wrong, or right but already used (a TOTP step or a recovery code spent). */
export type CodeOutcome = 'accepted' | 'invalid' | 'used';

/**
 * The refusal of a code. The code on the wire is INVALID_CODE either way; a replayed code says so, so a
 * person who typed a code twice waits for the next one instead of doubting their authenticator.
 */
const invalidCode = (status: 400 | 401, outcome: CodeOutcome = 'invalid') =>
  errorWithStatus(
    ACCOUNT_ERRORS,
    'INVALID_CODE',
    status,
    outcome === 'used'
      ? 'code already used: wait for the next code in your authenticator app, or use a recovery code you have not used'
      : 'the code is not valid',
  );

async function loadUser(db: Db, userId: string): Promise<UserRow> {
  const [user] = await db.select().from(users).where(eq(users.id, userId));
  if (!user) throw errorOf(COMMON_ERRORS, 'INVALID_TOKEN', 'invalid token');
  return user;
}

/**
 * Accepts a TOTP code at most once per time step. The step is claimed with one guarded UPDATE
 * (`… WHERE totp_last_step < step`), so two racing uses of one code cannot both pass, and neither can
 * a code of an earlier step than one already used (no replay).
 */
export async function acceptTotp(deps: Deps, user: UserRow, code: string): Promise<CodeOutcome> {
  if (!user.totpSecretEnc || !/^\d{6}$/.test(code)) return 'invalid';
  const secret = decrypt(deps.keys.encryption, user.totpSecretEnc);
  let result;
  try {
    // epochTolerance 30 s with a 30 s period: the previous, current and next step (±1 step).
    result = await verify({ secret, token: code, epochTolerance: 30 });
  } catch {
    return 'invalid';
  }
  if (!result.valid || !('timeStep' in result)) return 'invalid';
  const step = result.timeStep;
  const claimed = await deps.db
    .update(users)
    .set({ totpLastStep: step })
    .where(and(eq(users.id, user.id), or(isNull(users.totpLastStep), lt(users.totpLastStep, step))))
    .returning({ id: users.id });
  // A right code whose step (or a later one) was already claimed: a replay.
  return claimed.length > 0 ? 'accepted' : 'used';
}

/** Recovery codes are compared without case, spaces or hyphens: `abcde-fghij`, `ABCDEFGHIJ` are one code. */
const normaliseRecoveryCode = (code: string): string => code.toLowerCase().replace(/[^a-z0-9]/g, '');
const recoveryHash = (deps: Deps, code: string) =>
  hmacSecret(deps.keys.hmac, `recovery:${normaliseRecoveryCode(code)}`);

/** Spends a recovery code: one guarded UPDATE … WHERE used_at IS NULL RETURNING; of two racers one wins. */
export async function redeemRecoveryCode(deps: Deps, userId: string, code: string): Promise<CodeOutcome> {
  if (normaliseRecoveryCode(code).length !== 10) return 'invalid';
  const rows = await deps.db
    .update(recoveryCodes)
    .set({ usedAt: new Date() })
    .where(
      and(
        eq(recoveryCodes.userId, userId),
        eq(recoveryCodes.codeHash, recoveryHash(deps, code)),
        isNull(recoveryCodes.usedAt),
      ),
    )
    .returning({ id: recoveryCodes.id });
  if (rows.length > 0) return 'accepted';
  const [spent] = await deps.db
    .select({ id: recoveryCodes.id })
    .from(recoveryCodes)
    .where(and(eq(recoveryCodes.userId, userId), eq(recoveryCodes.codeHash, recoveryHash(deps, code))));
  return spent ? 'used' : 'invalid';
}

/** A six-digit code is a TOTP code; anything else is tried as a recovery code (interface document). */
export async function acceptSecondFactor(deps: Deps, user: UserRow, rawCode: string): Promise<CodeOutcome> {
  const code = rawCode.replace(/\s+/g, '');
  if (/^\d{6}$/.test(code)) return acceptTotp(deps, user, code);
  return redeemRecoveryCode(deps, user.id, code);
}

export async function twoFactorStatus(
  deps: Deps,
  userId: string,
): Promise<{ enabled: boolean; recovery_codes_remaining: number }> {
  const user = await loadUser(deps.db, userId);
  const [row] = await deps.db
    .select({ n: count() })
    .from(recoveryCodes)
    .where(and(eq(recoveryCodes.userId, userId), isNull(recoveryCodes.usedAt)));
  const enabled = user.totpEnabledAt !== null;
  return { enabled, recovery_codes_remaining: enabled ? Number(row?.n ?? 0) : 0 };
}

/**
 * Starts (or restarts) enrolment: a new secret, kept encrypted until a code confirms it. Refused while
 * 2FA is on (disable first), so a stolen session cannot silently replace the authenticator.
 */
export async function setupTwoFactor(
  deps: Deps,
  userId: string,
): Promise<{ secret: string; otpauth_uri: string }> {
  const user = await loadUser(deps.db, userId);
  if (user.totpEnabledAt)
    throw errorOf(
      ACCOUNT_ERRORS,
      'TWO_FACTOR_ALREADY_ENABLED',
      'two-factor authentication is already on; disable it first',
    );
  const secret = generateSecret(); // 20 random bytes, base32 (RFC 4226 §4 recommends 160 bits)
  await deps.db
    .update(users)
    .set({ totpSecretEnc: encrypt(deps.keys.encryption, secret), totpLastStep: null })
    .where(and(eq(users.id, userId), isNull(users.totpEnabledAt)));
  const otpauth_uri = generateURI({
    issuer: TOTP_ISSUER,
    label: user.email,
    secret,
    algorithm: 'sha1',
    digits: 6,
    period: 30,
  });
  return { secret, otpauth_uri };
}

function newRecoveryCodes(): string[] {
  return Array.from({ length: RECOVERY_CODE_COUNT }, () => {
    const raw = randomToken(7).slice(0, 10); // 50 bits each
    return `${raw.slice(0, 5)}-${raw.slice(5)}`;
  });
}

/** Confirms enrolment with a current code; returns the ten recovery codes, shown this once. */
export async function enableTwoFactor(
  deps: Deps,
  userId: string,
  code: string,
  origin: AuditOrigin,
): Promise<{ recoveryCodes: string[] }> {
  const user = await loadUser(deps.db, userId);
  if (user.totpEnabledAt)
    throw errorOf(ACCOUNT_ERRORS, 'TWO_FACTOR_ALREADY_ENABLED', 'two-factor authentication is already on');
  if (!user.totpSecretEnc)
    throw errorOf(ACCOUNT_ERRORS, 'TWO_FACTOR_NOT_SET_UP', 'call POST /v1/2fa/setup first');
  await deps.limits.twoFactorFailures.check(userId);
  const outcome = await acceptTotp(deps, user, code.replace(/\s+/g, ''));
  if (outcome !== 'accepted') {
    await deps.limits.twoFactorFailures.fail(userId);
    throw invalidCode(400, outcome);
  }
  const codes = newRecoveryCodes();
  const enabled = await transaction(deps.db, async (tx) => {
    const [row] = await tx
      .update(users)
      .set({ totpEnabledAt: new Date() })
      .where(and(eq(users.id, userId), isNull(users.totpEnabledAt)))
      .returning({ id: users.id });
    if (!row) return false;
    await tx.delete(recoveryCodes).where(eq(recoveryCodes.userId, userId));
    await tx.insert(recoveryCodes).values(codes.map((c) => ({ userId, codeHash: recoveryHash(deps, c) })));
    await recordAuditEvent(tx, accountEvent(userId, 'account.2fa_enabled', origin));
    return true;
  });
  if (!enabled)
    throw errorOf(ACCOUNT_ERRORS, 'TWO_FACTOR_ALREADY_ENABLED', 'two-factor authentication is already on');
  await deps.limits.twoFactorFailures.reset(userId);
  return { recoveryCodes: codes };
}

/** Turns 2FA off with a current TOTP code or an unused recovery code; the seed and codes are erased. */
export async function disableTwoFactor(
  deps: Deps,
  userId: string,
  code: string,
  origin: AuditOrigin,
): Promise<void> {
  const user = await loadUser(deps.db, userId);
  if (!user.totpEnabledAt)
    throw errorOf(ACCOUNT_ERRORS, 'TWO_FACTOR_NOT_ENABLED', 'two-factor authentication is not on');
  await deps.limits.twoFactorFailures.check(userId);
  const outcome = await acceptSecondFactor(deps, user, code);
  if (outcome !== 'accepted') {
    await deps.limits.twoFactorFailures.fail(userId);
    throw invalidCode(400, outcome);
  }
  await transaction(deps.db, async (tx) => {
    await tx
      .update(users)
      .set({ totpSecretEnc: null, totpEnabledAt: null, totpLastStep: null })
      .where(eq(users.id, userId));
    await tx.delete(recoveryCodes).where(eq(recoveryCodes.userId, userId));
    await recordAuditEvent(tx, accountEvent(userId, 'account.2fa_disabled', origin));
  });
  await deps.limits.twoFactorFailures.reset(userId);
}

export { invalidCode };
