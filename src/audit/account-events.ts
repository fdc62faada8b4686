import type { AccountAuditAction } from './actions.js';
import type { AuditOrigin } from './context.js';

// A person's own account events (CONTRACT §11: sign-ins and failures, password change and reset, 2FA on
// and off, sessions revoked, account deletion), in their account log: the chain keyed by their user id.

/**
 * The event, for recordAuditEvent. `actor`: who acted when the request carries no credential of theirs
 * (a sign-in, a reset by its mailed link): the person themself.
 */
export function accountEvent(
  userId: string,
  action: AccountAuditAction,
  origin: AuditOrigin,
  details: Record<string, unknown> = {},
  actor?: { id: string; email: string } | 'self',
) {
  return {
    userId,
    action,
    origin,
    target: { type: 'user', id: userId },
    details,
    ...(actor === undefined
      ? {}
      : {
          actor:
            actor === 'self'
              ? { type: 'user' as const, id: userId }
              : { type: 'user' as const, id: actor.id, email: actor.email },
        }),
  };
}

/** What a new password took back, as an event's details (counts, never the credentials). */
export const revokedCounts = (r: { sessionsRevoked: number; grantsRevoked: number }) => ({
  sessions_revoked: r.sessionsRevoked,
  grants_revoked: r.grantsRevoked,
});
