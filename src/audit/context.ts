import type { Request } from 'express';

// Who made a change and from where, for the audit event the change writes (CONTRACT §11: actor,
// credential_id, ip, user_agent "from the request"). Every caller of recordAuditEvent passes it: a route,
// page or tool makes it from its request (auditOriginOf), a job passes SYSTEM_ORIGIN. It is an argument,
// not the request's async context: an AsyncLocalStorage in use makes every promise of the process pay for
// its propagation, model calls included (docs/decisions/0165-audit-origin-is-an-argument.md).

/** What an audit event says about who made the change. */
export interface AuditOrigin {
  actor: { type: 'user' | 'service_account' | 'system'; id: string | null; email?: string };
  credentialId: string | null;
  ip: string | null;
  userAgent: string | null;
}

/** A user agent is the client's to write: kept to a bounded length, control characters dropped. */
const MAX_USER_AGENT = 256;
// eslint-disable-next-line no-control-regex -- control characters are what this drops
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;

export const SYSTEM_ACTOR = { type: 'system', id: null } as const;

/** A service account's id (CONTRACT §11: `sa_…`); its credentials act as that principal. */
const isServiceAccount = (id: string) => id.startsWith('sa_');

function actorOf(principal: Request['principal']): AuditOrigin['actor'] {
  if (!principal) return { ...SYSTEM_ACTOR };
  if (isServiceAccount(principal.userId)) return { type: 'service_account', id: principal.userId };
  return { type: 'user', id: principal.userId, email: principal.email };
}

function credentialOf(principal: Request['principal']): string | null {
  if (!principal) return null;
  if (principal.kind === 'grant') return principal.grantId; // an OAuth grant with scope account (reads only)
  return principal.kind === 'session' ? principal.sessionId : String(principal.tokenId);
}

/** Who made a change made outside any request: svc itself (a job, a sweep, the processor's webhooks). */
export const SYSTEM_ORIGIN: AuditOrigin = Object.freeze({
  actor: Object.freeze({ ...SYSTEM_ACTOR }),
  credentialId: null,
  ip: null,
  userAgent: null,
});

/** What a request says about who makes the changes it makes: its principal, address and user agent. */
export function auditOriginOf(req: Request): AuditOrigin {
  const agent = req.get('user-agent');
  return {
    actor: actorOf(req.principal),
    credentialId: credentialOf(req.principal),
    ip: req.ip ?? null,
    userAgent: agent ? agent.replace(CONTROL, '').slice(0, MAX_USER_AGENT) : null,
  };
}
