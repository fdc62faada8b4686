import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';
import type { Db } from '../../src/db/client.js';

/**
 * True once nothing more can reach a receiver for `orgKey`: every balance crossing of the org handled
 * (its events written in the same transaction) and none of its webhook deliveries pending (each one
 * answered by its receiver and recorded). The positive signal a "nothing more comes" check waits for,
 * instead of sleeping through a worker's passes.
 */
export async function outboxDrained(db: Db, orgKey: string): Promise<boolean> {
  const [row] = await queryRows<{ crossings: unknown; deliveries: unknown }>(
    db,
    sql`select
      (select count(*) from balance_crossings where org_key = ${orgKey} and handled_at is null) as crossings,
      (select count(*) from webhook_deliveries d join outbound_events e on e.id = d.event_id
        where e.org_key = ${orgKey} and d.status = 'pending') as deliveries`,
  );
  return Number(row!.crossings) === 0 && Number(row!.deliveries) === 0;
}
