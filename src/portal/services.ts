// The account services the pages call (owner ACCOUNTS, src/accounts). One place to import them from,
// so the pages read like the API routes that call the same functions.
import type { Deps } from '../deps.js';
import { AppError } from '../http/errors.js';

export { registerAndNotify, verifyEmail, resendVerification } from '../accounts/email-verification.js';
export { requestPasswordReset, confirmPasswordReset } from '../accounts/password-reset.js';

const pending = (): never => {
  throw new AppError(503, 'UNAVAILABLE', 'this part of the service is not available yet');
};

export async function loginWithPassword(
  _deps: Deps,
  _input: { email: string; password: string },
): Promise<{ kind: 'session'; token: string } | { kind: 'challenge'; challengeToken: string; email: string }> {
  return pending();
}
export async function completeTwoFactorLogin(_deps: Deps, _input: { challengeToken: string; code: string }): Promise<{ token: string }> {
  return pending();
}
export async function twoFactorStatus(_deps: Deps, _userId: string): Promise<{ enabled: boolean; recoveryCodesRemaining: number }> {
  return { enabled: false, recoveryCodesRemaining: 0 };
}
export async function setupTwoFactor(_deps: Deps, _userId: string, _opts: { reuse?: boolean } = {}): Promise<{ secret: string; otpauthUri: string }> {
  return pending();
}
export async function enableTwoFactor(_deps: Deps, _userId: string, _code: string): Promise<{ recoveryCodes: string[] }> {
  return pending();
}
export async function disableTwoFactor(_deps: Deps, _userId: string, _code: string): Promise<unknown> {
  return pending();
}

// Organizations (owner ORGS, src/orgs).
export interface MemberView {
  userId: string;
  email: string;
  name: string;
  role: string;
  createdAt: Date;
}
export async function createClient(_deps: Deps, _input: { userId: string; name: string }): Promise<{ orgKey: string }> {
  return pending();
}
export async function listMembers(_deps: Deps, _orgKey: string): Promise<MemberView[]> {
  return pending();
}
