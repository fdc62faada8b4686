import type { ErrorCatalogue } from '../http/errors.js';

// The clients' (organizations') error codes (STYLE: Errors; docs/decisions/0086-error-catalogues.md):
// clients, members and invitations (CONTRACT §5), beside the common ones (src/http/errors.ts: NOT_FOUND,
// NO_ACCESS, NOT_A_MEMBER) and the accounts' USER_NOT_FOUND. Answered as {detail: {code, message}}.

export const ORG_ERRORS = {
  CANNOT_REMOVE_OWNER: { status: 400, message: "the client's owner cannot be removed" },
  CANNOT_CHANGE_OWNER: { status: 400, message: "the owner's role cannot be changed" },
  CANNOT_DELETE_DEFAULT: { status: 400, message: "a user's default client cannot be deleted" },
  OWNER_CANNOT_LEAVE: { status: 400, message: 'the owner cannot leave the client; delete it instead' },
  INVITATION_FOR_ANOTHER_EMAIL: { status: 403, message: 'the invitation was sent to another e-mail address' },
  INVITATION_NOT_FOUND: { status: 404, message: 'the invitation link is not valid' },
  ALREADY_MEMBER: { status: 409, message: 'the account is already a member of the client' },
  TOO_MANY_INVITATIONS: { status: 409, message: 'the client has as many open invitations as it may hold' },
  INVITATION_PENDING: { status: 409, message: 'an invitation to this address is being sent; try again' },
  INVITATION_USED: { status: 409, message: 'the invitation has already been accepted' },
  INVITATION_REVOKED: { status: 410, message: 'this invitation was withdrawn by the owner' },
  INVITATION_EXPIRED: { status: 410, message: 'this invitation has expired; ask the owner for a new one' },
} as const satisfies ErrorCatalogue;
