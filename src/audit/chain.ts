import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import type { ActorType } from './actions.js';

// An audit event as the API answers it, and the hash chain over those answers (CONTRACT §11): `hash` is
// the hex SHA-256 of the event's JSON without `hash`, in RFC 8785 canonical form (JCS), and `prev_hash`
// the hash of the previous event of the same chain (an organization's, or a person's account log), 64
// zeros for the first. An auditor recomputes it from the exported JSONL alone.

export const GENESIS_HASH = '0'.repeat(64);

export interface AuditEventItem {
  id: string;
  /** Unix seconds. */
  created_at: number;
  action: string;
  actor: { type: ActorType; id: string | null; email?: string };
  credential_id: string | null;
  ip: string | null;
  user_agent: string | null;
  target: { type: string; id: string | null };
  details: Record<string, unknown>;
  prev_hash: string;
  hash: string;
}

/** The hash an event's other fields give it. */
export function hashOfEvent(event: Omit<AuditEventItem, 'hash'> | AuditEventItem): string {
  const { hash: _ignored, ...rest } = event as AuditEventItem;
  const canonical = canonicalize(rest);
  if (canonical === undefined) throw new Error('an audit event has no JSON form');
  return createHash('sha256').update(canonical, 'utf8').digest('hex');
}

/** A stored row of audit_events, as a raw select reads it. */
export interface AuditEventRow {
  id: string;
  seq: number | string;
  created_at: Date | string;
  action: string;
  actor_type: ActorType;
  actor_id: string | null;
  actor_email: string | null;
  credential_id: string | null;
  ip: string | null;
  user_agent: string | null;
  target_type: string;
  target_id: string | null;
  details: unknown;
  prev_hash: string;
  hash: string;
}

export const AUDIT_COLUMNS = `id, seq, created_at, action, actor_type, actor_id, actor_email, credential_id, ip,
  user_agent, target_type, target_id, details, prev_hash, hash`;

export function itemOfRow(r: AuditEventRow): AuditEventItem {
  const details = typeof r.details === 'string' ? (JSON.parse(r.details) as unknown) : r.details;
  return {
    id: r.id,
    created_at: Math.floor(new Date(r.created_at).getTime() / 1000),
    action: r.action,
    actor: {
      type: r.actor_type,
      id: r.actor_id,
      ...(r.actor_email === null ? {} : { email: r.actor_email }),
    },
    credential_id: r.credential_id,
    ip: r.ip,
    user_agent: r.user_agent,
    target: { type: r.target_type, id: r.target_id },
    details: (details ?? {}) as Record<string, unknown>,
    prev_hash: r.prev_hash,
    hash: r.hash,
  };
}
