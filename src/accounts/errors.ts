import type { ErrorCatalogue } from '../http/errors.js';

// The accounts domain's error codes (STYLE: Errors; docs/decisions/0086-error-catalogues.md): sign-up,
// sign-in, two-factor, password reset, e-mail verification and account deletion (CONTRACT §4), beside the
// common ones (src/http/errors.ts). Answered as {detail: {code, message}}; docs/errors.md lists them.

export const ACCOUNT_ERRORS = {
  WEAK_PASSWORD: {
    status: 400,
    message: 'the password is too short or lacks a letter, a number or a symbol',
  },
  WRONG_PASSWORD: { status: 400, message: 'the current password is not right' },
  WRONG_PASSWORD_OR_CODE: { status: 400, message: 'the password or the two-factor code is not right' },
  CODE_REQUIRED: { status: 400, message: 'a two-factor or recovery code is needed for this change' },
  INVALID_CODE: {
    status: 400,
    alsoStatus: 401,
    message: 'the two-factor code is not valid (401 when signing in, 400 when changing the setting)',
  },
  TWO_FACTOR_NOT_SET_UP: { status: 400, message: 'two-factor authentication was not set up first' },
  INVALID_RESET_TOKEN: { status: 400, message: 'the password reset link is invalid, used or expired' },
  INVALID_VERIFICATION_TOKEN: {
    status: 400,
    message: 'the e-mail verification link is invalid, used or expired',
  },
  INVALID_CREDENTIALS: { status: 401, message: 'the e-mail or the password is not correct' },
  INVALID_CHALLENGE: {
    status: 401,
    message: 'the two-factor sign-in attempt is unknown, expired or used up',
  },
  USER_NOT_FOUND: { status: 404, message: 'no registered, verified account has this e-mail' },
  EMAIL_TAKEN: { status: 409, message: 'an account with this e-mail already exists' },
  TWO_FACTOR_ALREADY_ENABLED: { status: 409, message: 'two-factor authentication is already on' },
  TWO_FACTOR_NOT_ENABLED: { status: 409, message: 'two-factor authentication is not on' },
  ACCOUNT_DELETION_BLOCKED: {
    status: 409,
    message:
      'the account cannot be deleted yet (detail.blockers says why: a shared client, a debt, a subscription)',
  },
} as const satisfies ErrorCatalogue;
