import type { Db } from '../db/client.js';
import type { Role } from '../db/schema.js';
import { noAccess, notFound } from '../http/errors.js';
import { liveRole } from '../orgs/membership.js';
import { findProject, userShareRole, type ProjectRow } from './queries.js';

// Who may do what to a project (interface document: Projects rule 1; CONTRACT §5, §10).
//   org owner / member  read and write every project of the org, manage shares, delete, fork from it
//   org viewer          reads
//   user share editor   reads and writes that project's brief, reports and files (that project alone)
//   user share viewer   reads that project alone
// A project in a client the caller does not belong to (and not shared with them): 403 NO_ACCESS;
// an unknown id: 404 NOT_FOUND.

/** The caller of a project operation. */
export interface Actor {
  userId: string;
  /**
   * Set for an `svc_` API token (the token acts only within its own organization: docs/platform.md)
   * and for a platform grant bound to the organization chosen at consent (CONTRACT §7: a client other
   * than svc-cli without "all my organizations"). Sessions, svc-cli grants and grants of all
   * organizations act across the user's live memberships.
   */
  boundOrgKey?: string | undefined;
  /**
   * The caller's role in one organization as this request's own authentication has just read it live
   * (the MCP guard: the acting organization, read with the grant). orgRoleOf answers that organization
   * from it instead of reading the same membership twice in one request; nothing outlives the request,
   * so a removal still takes effect on the next one (bench/README.md, mcp).
   */
  readRole?: { orgKey: string; role: Role } | undefined;
}

export type Need = 'read' | 'write' | 'manage';

export interface ProjectAccess {
  project: ProjectRow;
  /** The org role, or the share role when access comes from a share. */
  role: Role | 'editor';
  viaShare: boolean;
}

/** The caller's live role in an org, honouring a token's bound org (null: no access). */
export async function orgRoleOf(db: Db, actor: Actor, orgKey: string): Promise<Role | null> {
  if (actor.boundOrgKey && actor.boundOrgKey !== orgKey) return null;
  if (actor.readRole?.orgKey === orgKey) return actor.readRole.role;
  return liveRole(db, actor.userId, orgKey);
}

export const canWriteOrg = (role: Role | null): boolean => role === 'owner' || role === 'member';

function allows(access: { role: Role | 'editor'; viaShare: boolean }, need: Need): boolean {
  if (need === 'read') return true;
  if (need === 'write') return access.role !== 'viewer';
  return !access.viaShare && canWriteOrg(access.role as Role);
}

/** Loads the project and checks the caller may `need` it; `lock` re-reads it locked inside a transaction. */
export async function requireProject(
  db: Db,
  actor: Actor,
  projectId: string,
  need: Need,
  lock?: 'update' | 'share',
): Promise<ProjectAccess> {
  const project = await findProject(db, projectId, lock);
  if (!project) throw notFound('project not found');
  let access: Omit<ProjectAccess, 'project'> | null = null;
  const role = await orgRoleOf(db, actor, project.orgId);
  if (role) access = { role, viaShare: false };
  else if (!actor.boundOrgKey) {
    const shared = await userShareRole(db, project.id, actor.userId);
    if (shared) access = { role: shared, viaShare: true };
  }
  if (!access) throw noAccess('this project belongs to a client you do not belong to');
  if (!allows(access, need)) {
    throw noAccess(
      need === 'manage'
        ? 'only owners and members of the client can do this'
        : 'your role can only read this project',
    );
  }
  return { project, ...access };
}
