import type { Deps } from '../deps.js';
import { assertCredentialReaches, principalOf, type Auth, type CallerRequest } from '../auth/principal.js';
import { noAccess } from '../http/errors.js';
import type { EntryStep } from '../http/entry-steps.js';
import type { Read, ReadRequest } from '../http/read-row.js';
import { parseOrgId } from '../ids.js';
import { clientBalanceOfMember, ownerBalance } from './service.js';

// The two balance reads every portal visit and `svc balance` make (CONTRACT §8), as reads that the route
// table serves ahead of Express and billing/routes.ts mounts on Express (src/http/read-row.ts; decision
// 0136). A session or an svc_ bearer, and scope `account` grants (CONTRACT §7).

type BalanceRequest = CallerRequest & ReadRequest;

export function balanceReads(deps: Deps, auth: Auth): Read<BalanceRequest>[] {
  const { db } = deps;
  const steps = [auth.require({ grantReads: true })] as EntryStep<BalanceRequest>[];
  return [
    {
      path: '/v1/owner/balance',
      steps,
      read: (req) => ownerBalance(db, principalOf(req).userId),
    },
    {
      // The role and the balance in one statement (decision 0127); a viewer reads no billing (CONTRACT §8).
      path: '/v1/clients/:client_id/credits/balance',
      steps,
      read: async (req) => {
        const principal = principalOf(req);
        const orgKey = parseOrgId(String(req.params?.client_id ?? ''));
        const read = orgKey ? await clientBalanceOfMember(db, principal.userId, orgKey) : null;
        if (!orgKey || !read || read.role === 'viewer') throw noAccess("no access to this client's billing");
        assertCredentialReaches(principal, orgKey);
        return read.balance;
      },
    },
  ];
}
