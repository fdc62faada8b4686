import { sql, type SQL } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { unknownCursor } from '../http/pagination.js';
import {
  AUDIT_COLUMNS,
  GENESIS_HASH,
  hashOfEvent,
  itemOfRow,
  type AuditEventItem,
  type AuditEventRow,
} from './chain.js';

// Reading a chain of the audit log (CONTRACT §11): a page of it, newest first, with filters; the whole of
// it for an export; and its verification. `chain` is an organization's stored key or a person's user id.
//
// Every page is read along one of audit_events' keysets — (chain, seq), (chain, action, seq),
// (chain, actor_id, seq) — from the cursor's place down, so a page costs the same at any depth and in
// a chain of millions; `since`/`until` become bounds on seq through (chain, created_at, seq).

export interface AuditFilter {
  action?: string | undefined;
  actorId?: string | undefined;
  /** Unix seconds, inclusive. */
  since?: number | undefined;
  /** Unix seconds, exclusive. */
  until?: number | undefined;
}

export interface AuditPage {
  limit: number;
  offset: number;
  startingAfter?: string | undefined;
}

/** The bounds on seq a filter and a cursor set, as SQL conditions. */
async function seqBounds(db: Db, chain: string, filter: AuditFilter, startingAfter?: string): Promise<SQL> {
  const parts: SQL[] = [];
  if (startingAfter !== undefined) {
    const [c] = await queryRows<{ seq: number | string }>(
      db,
      sql`select seq from audit_events where id = ${startingAfter} and chain = ${chain}`,
    );
    if (!c) throw unknownCursor();
    parts.push(sql`and seq < ${Number(c.seq)}`);
  }
  // Times are monotonic along a chain (each event is stamped under the chain's lock), so a time range is a
  // seq range: the first event at or after the bound, found in (chain, created_at, seq).
  if (filter.until !== undefined)
    parts.push(sql`and seq < coalesce((select seq from audit_events where chain = ${chain}
        and created_at >= to_timestamp(${filter.until}) order by created_at, seq limit 1), 9223372036854775807)`);
  if (filter.since !== undefined)
    parts.push(sql`and seq >= coalesce((select seq from audit_events where chain = ${chain}
        and created_at >= to_timestamp(${filter.since}) order by created_at, seq limit 1), 9223372036854775807)`);
  if (filter.action !== undefined) parts.push(sql`and action = ${filter.action}`);
  if (filter.actorId !== undefined) parts.push(sql`and actor_id = ${filter.actorId}`);
  return sql.join(parts, sql` `);
}

/** One page, newest first, and whether more follow. */
export async function listAuditEvents(
  db: Db,
  chain: string,
  filter: AuditFilter,
  page: AuditPage,
): Promise<{ data: AuditEventItem[]; has_more: boolean }> {
  const bounds = await seqBounds(db, chain, filter, page.startingAfter);
  const rows = await queryRows<AuditEventRow>(
    db,
    sql`select ${sql.raw(AUDIT_COLUMNS)} from audit_events where chain = ${chain} ${bounds}
        order by seq desc limit ${page.limit + 1} offset ${page.offset}`,
  );
  return { data: rows.slice(0, page.limit).map(itemOfRow), has_more: rows.length > page.limit };
}

const BATCH = 1000;

/** Every event of a chain that the filter keeps, newest first, read a batch at a time (the exports). */
export async function* allAuditEvents(
  db: Db,
  chain: string,
  filter: AuditFilter,
): AsyncGenerator<AuditEventItem> {
  let startingAfter: string | undefined;
  for (;;) {
    const page = await listAuditEvents(db, chain, filter, { limit: BATCH, offset: 0, startingAfter });
    yield* page.data;
    if (!page.has_more) return;
    startingAfter = page.data.at(-1)!.id;
  }
}

/**
 * Recomputes a chain from its first event (CONTRACT §11 `…/audit-events/verify`): each event must sit
 * right after the one before (seq), carry its hash as `prev_hash` (64 zeros for the first) and hash to
 * its own `hash`. The first event that does not names where the chain was edited: an event changed,
 * removed (the next one's `prev_hash` no longer matches) or inserted. `events` counts the whole chain.
 */
export async function verifyAuditChain(
  db: Db,
  chain: string,
): Promise<{ valid: boolean; events: number; first_invalid_id: string | null }> {
  let events = 0;
  let firstInvalid: string | null = null;
  let prevHash = GENESIS_HASH;
  let prevSeq = 0;
  for (;;) {
    const rows = await queryRows<AuditEventRow>(
      db,
      sql`select ${sql.raw(AUDIT_COLUMNS)} from audit_events where chain = ${chain} and seq > ${prevSeq}
          order by seq limit ${BATCH}`,
    );
    for (const row of rows) {
      const item = itemOfRow(row);
      events += 1;
      const ok =
        Number(row.seq) === prevSeq + 1 && item.prev_hash === prevHash && hashOfEvent(item) === item.hash;
      if (!ok) firstInvalid ??= item.id;
      prevHash = item.hash;
      prevSeq = Number(row.seq);
    }
    if (rows.length < BATCH) return { valid: firstInvalid === null, events, first_invalid_id: firstInvalid };
  }
}
