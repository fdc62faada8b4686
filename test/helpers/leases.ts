import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';
import type { TestServer } from './server.js';
import { eventuallyValue } from './eventually.js';

// Concurrency lease rows of one org (src/models/slot/concurrency.ts). A finished call's slot stays with its
// process for the reuse window (DEFAULT_SLOT_REUSE_MS), so "released" is observed by waiting for it.

/** The org's live leases (an expired row stays until a taker overwrites it, and counts for nothing). */
export async function leaseRows(
  server: TestServer,
  orgKey: string,
): Promise<{ lease_id: string; kind: string }[]> {
  return queryRows(
    server.deps.db,
    sql`select lease_id, kind from concurrency_leases where org_id = ${orgKey} and expires_at > now() order by slot`,
  );
}

/** Resolves with 0 once the org holds no lease, or with the count still held after `timeoutMs`. */
export async function waitForNoLeases(
  server: TestServer,
  orgKey: string,
  timeoutMs = 2_000,
): Promise<number> {
  const count = async () => (await leaseRows(server, orgKey)).length;
  // The count itself on a timeout: callers assert it, so a failure names how many were left.
  return eventuallyValue(count, (n) => n === 0, timeoutMs).catch(count);
}
