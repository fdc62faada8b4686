// The account services the routes and the portal pages share (team brief: "Account services"): one
// import for callers; each part lives in its own file and builds on the account records (./users.ts).
export {
  normaliseEmail,
  registerAccount,
  findUserByEmail,
  markEmailVerified,
  type RegisterInput,
  type UserRow,
  type OrgRow,
  type OnAccountCreated,
} from './users.js';
export { loginWithPassword, completeTwoFactorLogin, type LoginResult } from './login.js';
export {
  registerAndNotify,
  verifyEmail,
  resendVerification,
  sendVerificationMail,
} from './email-verification.js';
export { requestPasswordReset, confirmPasswordReset } from './password-reset.js';
export { twoFactorStatus, setupTwoFactor, enableTwoFactor, disableTwoFactor } from './two-factor.js';
