import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { beforeCommit, isTransaction, transaction, type BeforeCommit } from '../db/transaction.js';
import { newId, nowUnix } from '../ids.js';
import type { AccountAuditAction, OrgAuditAction } from './actions.js';
import { GENESIS_HASH, hashOfEvent, type AuditEventItem } from './chain.js';
import type { AuditOrigin } from './context.js';
import { scrubDetails, scrubText } from './scrub.js';
import { emitEvent } from '../events/outbox.js';

// The one writer of audit_events (CONTRACT §11). Every change the log records calls recordAuditEvent with
// the transaction that makes the change, so the event commits with it or not at all (never "after").

interface Common {
  target: { type: string; id: string | number | null };
  /** What changed: ids, names, roles, amounts. Never a secret (./scrub.ts drops one that slips in). */
  details?: Record<string, unknown>;
  /** Who did it, when the request's own caller is not the one to name (a sign-in, a job). */
  actor?: AuditOrigin['actor'];
  /** Who made the change and from where: a route's `auditOriginOf(req)`, a job's SYSTEM_ORIGIN. */
  origin: AuditOrigin;
}

/** An event of an organization's log, or of a person's own account log. */
export type AuditInput =
  | (Common & { orgKey: string; action: OrgAuditAction })
  | (Common & { userId: string; action: AccountAuditAction });

/** An event as the change saw it: everything but its place in the chain. */
type Prepared = { chain: string; orgKey: string | null; event: Omit<AuditEventItem, 'hash' | 'prev_hash'> };

/**
 * Records one event of `tx`'s change. It joins its chain when `tx` commits, after every other statement
 * of the transaction (src/db/transaction.ts): appending takes the chain's lock, and taking it last keeps
 * it out of the ledger's lock order. Called outside a transaction, it opens one.
 */
export async function recordAuditEvent(tx: Db, input: AuditInput): Promise<void> {
  if (!isTransaction(tx)) {
    await transaction(tx, (inner) => recordAuditEvent(inner, input));
    return;
  }
  const { origin } = input;
  const actor = input.actor ?? origin.actor;
  const orgKey = 'orgKey' in input ? input.orgKey : null;
  beforeCommit(tx, appendToChains, {
    chain: 'orgKey' in input ? input.orgKey : input.userId,
    orgKey,
    event: {
      id: newId('ae'),
      created_at: nowUnix(),
      action: input.action,
      actor: actor.email === undefined ? { type: actor.type, id: actor.id } : actor,
      credential_id: input.actor ? null : origin.credentialId,
      ip: origin.ip,
      user_agent: scrubText(origin.userAgent),
      target: { type: input.target.type, id: input.target.id === null ? null : String(input.target.id) },
      details: scrubDetails(input.details ?? {}) as Record<string, unknown>,
    },
  });
}

/**
 * Appends a transaction's events to their chains, chains in ascending order (the one order every writer
 * locks them in). Each chain's head is locked for the rest of the transaction (a transaction-scoped
 * advisory lock keyed by the chain), so concurrent changes of one organization append one after the
 * other, each on the hash of the one before; `(chain, seq)` is unique besides, so a writer that read a
 * stale head could only fail, never fork the chain.
 */
const appendToChains: BeforeCommit<Prepared> = {
  name: 'the audit log',
  async write(tx, items) {
    const chains = [...new Set(items.map((item) => item.chain))].sort();
    for (const chain of chains) {
      await tx.execute(sql`select pg_advisory_xact_lock(hashtextextended(${`audit_events:${chain}`}, 0))`);
      const [head] = await queryRows<{ seq: number | string; hash: string }>(
        tx,
        sql`select seq, hash from audit_events where chain = ${chain} order by seq desc limit 1`,
      );
      let seq = head ? Number(head.seq) : 0;
      let prevHash = head?.hash ?? GENESIS_HASH;
      for (const item of items.filter((i) => i.chain === chain)) {
        seq += 1;
        prevHash = await insertEvent(tx, item, seq, prevHash);
      }
    }
  },
};

/** Inserts one event at `seq` on `prevHash`; returns its hash. */
async function insertEvent(tx: Db, item: Prepared, seq: number, prevHash: string): Promise<string> {
  const event = { ...item.event, prev_hash: prevHash };
  const hash = hashOfEvent(event);
  await tx.execute(
    sql`insert into audit_events (id, chain, seq, created_at, action, actor_type, actor_id, actor_email,
          credential_id, ip, user_agent, target_type, target_id, details, prev_hash, hash)
        values (${event.id}, ${item.chain}, ${seq}, to_timestamp(${event.created_at}),
          ${event.action}, ${event.actor.type}, ${event.actor.id}, ${event.actor.email ?? null},
          ${event.credential_id}, ${event.ip}, ${event.user_agent}, ${event.target.type}, ${event.target.id},
          ${JSON.stringify(event.details)}::jsonb, ${event.prev_hash}, ${hash})`,
  );
  // The opt-in outbound event (CONTRACT §11 `audit.event`), queued in this transaction like every event
  // of the outbox, only when an endpoint of the organization asked for it.
  if (item.orgKey !== null) {
    const [subscribed] = await queryRows<{ n: unknown }>(
      tx,
      sql`select 1 as n from webhook_endpoints where org_key = ${item.orgKey} and 'audit.event' = any(events) limit 1`,
    );
    if (subscribed)
      await emitEvent(tx, { orgKey: item.orgKey, type: 'audit.event', data: { ...event, hash } });
  }
  return hash;
}
