import type { Deps } from '../src/deps.js';
import type { OAuthResource } from '../src/db/schema.js';
import {
  createGrants,
  grantTokens,
  storeNewRefreshToken,
  type GrantRow,
  type GrantTokens,
} from './grants.js';
import { recordIssuedGrants } from './codes.js';
import { transaction } from '../src/db/transaction.js';
import type { AuditOrigin } from '../src/audit/context.js';

// What one approval issues (CONTRACT §7): a grant per approved resource, each with its own access and
// refresh token, and the token response's top level repeating one of them — the resource named in the
// token request, platform when none.

/** The code was presented again while this exchange was issuing: nothing is issued (rolled back). */
export class CodeReplayedError extends Error {}

export interface IssuedApproval {
  top: GrantTokens;
  grants: GrantTokens[];
}

/** The grant the top-level fields repeat: the one named (platform among several), else platform, else the first. */
export function topResource(
  issued: readonly OAuthResource[],
  named: readonly OAuthResource[] | null,
): OAuthResource {
  const pool = named && named.length ? named : issued;
  return pool.includes('platform') ? 'platform' : pool[0]!;
}

export async function issueApproval(
  deps: Deps,
  input: {
    clientId: string;
    userId: string;
    orgKey: string;
    issuer: string;
    resources: OAuthResource[];
    named: OAuthResource[] | null;
    /** "All my organizations" ticked at approval (grants.ts grantSpansAllOrgs); default false. */
    allOrgs?: boolean;
    /** The approval's scope (oauth/params.ts approvalScope); absent: each resource's full scope. */
    scope?: string | null;
    /** The code that approved it: the grants are recorded on it so a replay can revoke them. */
    codeHash?: string;
    auditOrigin: AuditOrigin;
  },
): Promise<IssuedApproval> {
  // Grants, refresh tokens and the code's record in one transaction; signing after it commits.
  const stored = await transaction(deps.db, async (tx) => {
    const rows = await createGrants(tx, input, input.resources, input.auditOrigin);
    const out: { row: GrantRow; refresh: string }[] = [];
    for (const row of rows)
      out.push({ row, refresh: await storeNewRefreshToken(tx, deps.keys.hmac, row.id) });
    if (
      input.codeHash &&
      !(await recordIssuedGrants(
        tx,
        input.codeHash,
        rows.map((r) => r.id),
      ))
    ) {
      throw new CodeReplayedError();
    }
    return out;
  });
  const grants: GrantTokens[] = [];
  for (const { row, refresh } of stored) grants.push(await grantTokens(deps, row, refresh, input.issuer));
  const top = topResource(input.resources, input.named);
  return { top: grants[stored.findIndex((s) => s.row.resource === top)]!, grants };
}
