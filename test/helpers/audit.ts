import { sql } from 'drizzle-orm';
import type { z } from 'zod';
import { queryRows, type Db } from '../../src/db/client.js';
import { auditEventAnswer } from '../../src/audit/schema.js';
import { itemOfRow, AUDIT_COLUMNS, type AuditEventRow } from '../../src/audit/chain.js';
import type { TestServer } from './server.js';

// Reading the audit log behind svc's back (CONTRACT §11), and editing it as an attacker with the
// database's superuser would: triggers off for one transaction (`session_replication_role = replica`,
// on PostgreSQL and PGlite alike).

export type AuditEvent = z.infer<typeof auditEventAnswer>;

/** Every stored event of a chain (an org key or a user id), oldest first, as the API shapes them. */
export async function chainEvents(server: TestServer, chain: string): Promise<AuditEvent[]> {
  const rows = await queryRows<AuditEventRow>(
    server.deps.db,
    sql`select ${sql.raw(AUDIT_COLUMNS)} from audit_events where chain = ${chain} order by seq`,
  );
  return rows.map(itemOfRow) as AuditEvent[];
}

/** Every stored event of every chain (the secret scan reads them all). */
export async function allStoredEvents(db: Db): Promise<AuditEvent[]> {
  const rows = await queryRows<AuditEventRow>(db, sql`select ${sql.raw(AUDIT_COLUMNS)} from audit_events`);
  return rows.map(itemOfRow) as AuditEvent[];
}

/** Runs `statement` with every trigger off, as a superuser editing the table directly would. */
export async function behindSvcsBack(server: TestServer, statement: ReturnType<typeof sql>): Promise<void> {
  await server.deps.db.transaction(async (tx) => {
    await tx.execute(sql`set local session_replication_role = replica`);
    await tx.execute(statement);
  });
}
