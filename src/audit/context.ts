import { AsyncLocalStorage } from 'node:async_hooks';
import type { NextFunction, Request, Response } from 'express';

// Who made a change and from where, for the audit event the change writes (CONTRACT §11: actor,
// credential_id, ip, user_agent "from the request").
//
// Why not an argument: the changes the log records are made by services in every domain, many of them
// called from several routes and from jobs; threading a request's origin through each of their
// signatures would touch every caller for a value only the audit line reads. So the app keeps the
// request (read-only) in an AsyncLocalStorage for the length of its handling, as OpenTelemetry keeps
// its context, and recordAuditEvent reads its principal, address and user agent when it writes. Outside
// a request (jobs, the processor's webhooks, sweeps) there is none, and the actor is `system`.
// docs/decisions: "Audit events take the request's origin from its async context". A caller that has the
// origin in hand passes it instead (a job: SYSTEM_ORIGIN; a route: auditOriginOf(req)), and the context
// goes once every caller does (docs/decisions/0071-audit-origin-passed-where-it-is-at-hand.md).

const requests = new AsyncLocalStorage<Request>();

/** Express middleware, mounted after the body parsers (their stream callbacks would drop the context). */
export function auditRequestContext(req: Request, _res: Response, next: NextFunction): void {
  requests.run(req, next);
}

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

/** The origin of the request being handled (a `system` origin outside one). */
export function currentAuditOrigin(): AuditOrigin {
  const req = requests.getStore();
  return req ? auditOriginOf(req) : SYSTEM_ORIGIN;
}
