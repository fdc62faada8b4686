import type { Db } from '../db/client.js';
import { oauthGrants } from '../db/schema.js';
import type { AuditOrigin } from './context.js';
import { recordAuditEvent } from './record.js';

// OAuth grants' audit events (CONTRACT §11 `grant.approved|revoked`): one per grant, in the log of the
// organization the grant was made for, in the transaction that made or revoked it. Its id, client and
// resource, never a token.

export interface GrantOfEvent {
  id: string;
  org: string;
  userId: string;
  clientId: string;
  resource: string;
}

/** What a grant update returns for its events: `.returning(grantOfEventColumns)`. */
export const grantOfEventColumns = {
  id: oauthGrants.id,
  org: oauthGrants.org,
  userId: oauthGrants.userId,
  clientId: oauthGrants.clientId,
  resource: oauthGrants.resource,
};

export async function recordGrantEvents(
  tx: Db,
  action: 'grant.approved' | 'grant.revoked',
  grants: GrantOfEvent[],
  origin: AuditOrigin,
  reason?: string,
): Promise<void> {
  for (const g of grants)
    await recordAuditEvent(tx, {
      orgKey: g.org,
      action,
      target: { type: 'grant', id: g.id },
      details: { user_id: g.userId, client_id: g.clientId, resource: g.resource, reason },
      origin,
      // An approval is collected by the client (code exchange, device poll) without the person's
      // credential on that request: the person who approved is the actor.
      ...(action === 'grant.approved' ? { actor: { type: 'user' as const, id: g.userId } } : {}),
    });
}
