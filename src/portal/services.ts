import { eq } from 'drizzle-orm';
import { generateURI } from 'otplib';
import type { Deps } from '../deps.js';
import { users } from '../db/schema.js';
import { decrypt } from '../crypto/hash.js';
import * as accounts from '../accounts/service.js';
import * as orgs from '../orgs/service.js';
import type { AuditOrigin } from '../audit/context.js';
import { TOTP_ISSUER } from '../accounts/two-factor.js';

// The services the pages call: the very functions behind the /v1 routes (owners ACCOUNTS and ORGS), so
// a page can never be looser than the API. This file only adapts their shapes to the pages' needs.

export {
  loginWithPassword,
  completeTwoFactorLogin,
  registerAndNotify,
  verifyEmail,
  resendVerification,
  requestPasswordReset,
  confirmPasswordReset,
  enableTwoFactor,
  disableTwoFactor,
} from '../accounts/service.js';

export async function twoFactorStatus(
  deps: Deps,
  userId: string,
): Promise<{ enabled: boolean; recoveryCodesRemaining: number }> {
  const s = await accounts.twoFactorStatus(deps, userId);
  return { enabled: s.enabled, recoveryCodesRemaining: s.recovery_codes_remaining };
}

export async function setupTwoFactor(
  deps: Deps,
  userId: string,
): Promise<{ secret: string; otpauthUri: string }> {
  const s = await accounts.setupTwoFactor(deps, userId);
  return { secret: s.secret, otpauthUri: s.otpauth_uri };
}

/**
 * The enrolment in progress (set up, not yet enabled), to show the same QR code again after a wrong
 * first code instead of replacing the secret the person has just scanned. Null when there is none.
 */
export async function pendingTwoFactorSetup(
  deps: Deps,
  userId: string,
): Promise<{ secret: string; otpauthUri: string } | null> {
  const [user] = await deps.db.select().from(users).where(eq(users.id, userId));
  if (!user?.totpSecretEnc || user.totpEnabledAt) return null;
  const secret = decrypt(deps.keys.encryption, user.totpSecretEnc);
  // The same URI accounts.setupTwoFactor built (issuer, label, SHA-1, 6 digits, 30 s).
  const otpauthUri = generateURI({
    issuer: TOTP_ISSUER,
    label: user.email,
    secret,
    algorithm: 'sha1',
    digits: 6,
    period: 30,
  });
  return { secret, otpauthUri };
}

export const createClient = (deps: Deps, input: { userId: string; name: string }) =>
  orgs.createClient(deps.db, input.userId, input.name);
export const listMembers = (deps: Deps, orgKey: string) => orgs.listMembers(deps.db, orgKey);
export const addMemberByEmail = (
  deps: Deps,
  org: orgs.OrgRow,
  email: string,
  role: 'member' | 'viewer',
  origin: AuditOrigin,
) => orgs.addMemberByEmail(deps, org, email, role, origin);
export const removeMember = (deps: Deps, org: orgs.OrgRow, userId: string, origin: AuditOrigin) =>
  orgs.removeMember(deps, org, userId, { origin });
export { requireOrgRole } from '../orgs/service.js';
