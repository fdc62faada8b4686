import type { Request } from 'express';
import type { Deps } from '../deps.js';
import { assertCredentialReaches, principalOf } from '../auth/principal.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { parseOrgId, unix } from '../ids.js';
import type { Role } from '../db/schema.js';
import { requireOrgRole, type MemberRecord } from './service.js';

// The organization a /v1/clients/{client_id}/… route names and the caller's role in it, shared by the
// org routes (./routes.ts) and the people routes (./people-routes.ts).

/** The org a path names, in either spelling (CONTRACT §2); anything else names no org (404). */
export function orgKeyParam(req: Request): string {
  const key = parseOrgId(String(req.params.client_id ?? ''));
  if (!key) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such client');
  return key;
}

/**
 * The caller's role in the org named by the path. An svc_ token is bound to one organization
 * (Authentication 1b): it reaches only that client here, never the user's other clients.
 */
export async function callerRole(deps: Deps, req: Request, minRole: Role) {
  const principal = principalOf(req);
  const orgKey = orgKeyParam(req);
  const access = await requireOrgRole(deps.db, principal.userId, orgKey, minRole);
  assertCredentialReaches(principal, orgKey);
  return access;
}

/** A member record as the member routes answer it (CONTRACT §5). */
export const memberJson = (m: MemberRecord) => ({
  user_id: m.userId,
  email: m.email,
  name: m.name,
  role: m.role,
  created_at: unix(m.createdAt),
});
