import type { Deps } from '../deps.js';
import { principalOf, type Auth, type CallerRequest } from '../auth/principal.js';
import { invalidToken } from '../http/errors.js';
import type { EntryStep } from '../http/entry-steps.js';
import type { Read, ReadRequest } from '../http/read-row.js';
import { requireLiveCredential } from '../orgs/membership.js';
import { credentialStatus, grantStatus } from './status.js';

// GET /v1/auth/verify (interface document; CONTRACT §6), the read every CLI call and integration makes
// first, as a read that the route table serves ahead of Express and tokens/routes.ts mounts on Express
// (src/http/read-row.ts; decision 0136). Any valid credential may read its own status, whatever its scopes.

type VerifyRequest = CallerRequest & ReadRequest;

export function verifyRead(deps: Deps, auth: Auth): Read<VerifyRequest> {
  return {
    path: '/v1/auth/verify',
    steps: [
      auth.require({ anyScope: true, grantReads: true }),
      requireLiveCredential,
    ] as EntryStep<VerifyRequest>[],
    read: async (req) => {
      const principal = principalOf(req);
      // An OAuth grant with scope `account` reads it too (CONTRACT §7): who signed in, where, as what.
      if (principal.kind === 'grant') return grantStatus(deps.db, principal);
      // "B" only: a session is not an API credential (interface document: GET /v1/auth/verify).
      if (principal.kind !== 'api_token') throw invalidToken();
      // This request is a use: its stamp first, so last_used_at says so as the token list will.
      await auth.lastUseRecorded(principal.tokenId);
      return credentialStatus(deps.db, principal);
    },
  };
}
