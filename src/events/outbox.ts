import { sql } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { newId } from '../ids.js';
import type { EventType } from './types.js';

// The durable outbox of outbound events. An event is written in the transaction of what
// it reports (a balance crossing handled, a webhook's grant), with one pending delivery per endpoint of
// the organization subscribed to its type; the delivery workers (./delivery.ts) take it from there. So an
// event is never sent for something that rolled back, and never lost for something that committed.

/**
 * Records event `type` of org `orgKey` with `data` (its `data` object; keep it small and free of secrets)
 * and queues it for every subscribed endpoint, in `tx`. Returns the event id (`evt_…`).
 */
export async function emitEvent(
  tx: Db,
  event: { orgKey: string; type: EventType; data: Record<string, unknown> },
): Promise<string> {
  const id = newId('evt');
  await tx.execute(
    sql`with e as (
          insert into outbound_events (id, org_key, type, data)
          values (${id}, ${event.orgKey}, ${event.type}, ${JSON.stringify(event.data)}::jsonb)
          returning id)
        insert into webhook_deliveries (event_id, endpoint_id)
        select e.id, w.id from e, webhook_endpoints w
        where w.org_key = ${event.orgKey} and ${event.type} = any(w.events)`,
  );
  return id;
}
