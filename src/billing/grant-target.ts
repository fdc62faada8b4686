import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { textAt, type StripeObject } from './stripe-object.js';

// Where a purchase's tokens go (webhooks.ts for checkouts and invoices, auto-topup.ts for off-session
// charges).

export interface OrgRef {
  orgKey: string;
  ownerId: string;
}

/**
 * Purchases for a client deleted meanwhile go to its owner's default client (its pool's home). The client's
 * row is locked (FOR SHARE, before any account, as a deletion locks it before its accounts): a deletion
 * running now is waited for and seen, so a grant never lands in a client deleted after this read.
 */
export async function grantTarget(tx: Db, org: OrgRef): Promise<string> {
  const [row] = await queryRows<{ id: string }>(
    tx,
    sql`select case when o.deleted_at is null then o.id
                    else (select d.id from orgs d where d.owner_id = o.owner_id and d.is_default) end as id
        from orgs o where o.id = ${org.orgKey} for share`,
  );
  return row?.id ?? org.orgKey;
}

/** The client a processor object belongs to: our customer mapping first, then the metadata we set. */
export async function orgFor(
  tx: Db,
  customerId: string | null,
  metadata: StripeObject,
): Promise<OrgRef | null> {
  if (customerId) {
    const [row] = await queryRows<{ org_key: string; owner_id: string }>(
      tx,
      sql`select c.org_key, o.owner_id from billing_customers c join orgs o on o.id = c.org_key where c.customer_id = ${customerId}`,
    );
    if (row) return { orgKey: row.org_key, ownerId: row.owner_id };
  }
  const key = textAt(metadata, 'org_key');
  if (key) {
    const [row] = await queryRows<{ id: string; owner_id: string }>(
      tx,
      sql`select id, owner_id from orgs where id = ${key}`,
    );
    if (row) return { orgKey: row.id, ownerId: row.owner_id };
  }
  return null;
}
