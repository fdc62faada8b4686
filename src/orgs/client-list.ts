import type { Deps } from '../deps.js';
import { principalOf, type Auth, type CallerRequest } from '../auth/principal.js';
import type { EntryStep } from '../http/entry-steps.js';
import type { Read, ReadRequest } from '../http/read-row.js';
import { parse } from '../http/validate.js';
import { pageQuery, unknownCursor } from '../http/pagination.js';
import { clientIdOf, parseOrgId, unix } from '../ids.js';
import { liveMemberships, requireLiveCredential } from './membership.js';

// GET /v1/clients (interface document: Clients; CONTRACT §5), a read that the route table serves ahead of
// Express and orgs/routes.ts mounts on Express (src/http/read-row.ts; decision 0136). A session or an
// svc_ token whose own membership is live (Authentication 5); scope `account` grants read it too (§7).

type ListRequest = CallerRequest & ReadRequest;

export function clientListRead(deps: Deps, auth: Auth): Read<ListRequest> {
  return {
    path: '/v1/clients',
    steps: [auth.require({ grantReads: true }), requireLiveCredential] as EntryStep<ListRequest>[],
    read: async (req) => {
      // No query string (the row) is the first page.
      const { limit, offset, starting_after } = parse(pageQuery, req.query ?? {});
      // A user belongs to few clients, read whole and ordered in liveMemberships (default client first).
      const all = await liveMemberships(deps.db, principalOf(req).userId);
      // The cursor is a client of this list (either spelling, CONTRACT §2); the page starts after it.
      let start = 0;
      if (starting_after !== undefined) {
        const at = all.findIndex((o) => o.orgKey === parseOrgId(starting_after));
        if (at < 0) throw unknownCursor();
        start = at + 1;
      }
      const orgs = all.slice(start + offset, start + offset + limit);
      return {
        data: orgs.map((o) => ({
          id: clientIdOf(o.orgKey),
          name: o.name,
          role: o.role,
          created_at: unix(o.createdAt),
        })),
      };
    },
  };
}
