import { eq } from 'drizzle-orm';
import type { Database, Db } from '../db/client.js';
import { projects } from '../db/schema.js';
import { noAccess, notFound } from '../http/errors.js';
import type { Page } from '../http/pagination.js';
import { canWriteOrg, orgRoleOf, requireProject, type Actor } from './access.js';
import {
  contentCounts,
  copyFiles,
  copyReports,
  findProject,
  insertProject,
  listProjectsInOrg,
  orgProjectsPage,
  lockOrgProjectNames,
  namesWithPrefix,
} from './queries.js';
import { toProject, type ProjectDetailOut, type ProjectOut } from './schema.js';
import { transaction } from '../db/transaction.js';

// The rules of projects (interface document: Projects, rules 1–5; CONTRACT §10). REST routes and MCP
// tools both call these, so the two surfaces cannot drift apart.

/**
 * Projects of an org. A member sees all of them; someone who is not a member but has projects of that
 * org shared with them sees those; anyone else gets 403 NO_ACCESS.
 */
export async function listProjects(
  { db, readLane }: Pick<Database, 'db' | 'readLane'>,
  actor: Actor,
  input: { orgKey: string } & Page,
): Promise<ProjectOut[]> {
  const role = await orgRoleOf(db, actor, input.orgKey);
  if (role && input.startingAfter === undefined)
    return (await orgProjectsPage(readLane, input.orgKey, input)).map(toProject);
  if (role) return (await listProjectsInOrg(db, input.orgKey, input)).map(toProject);
  if (actor.boundOrgKey) throw noAccess('this token acts only within its own client');
  const shared = await listProjectsInOrg(db, input.orgKey, input, actor.userId);
  if (shared.length === 0 && input.offset === 0 && input.startingAfter === undefined)
    throw noAccess('you do not belong to this client');
  return shared.map(toProject);
}

export async function createProject(
  db: Db,
  actor: Actor,
  input: { orgKey: string; name: string; description?: string | undefined; brief?: string | undefined },
): Promise<ProjectOut> {
  if (!canWriteOrg(await orgRoleOf(db, actor, input.orgKey)))
    throw noAccess('you cannot create projects in this client');
  const row = await insertProject(db, {
    orgId: input.orgKey,
    name: input.name,
    description: input.description ?? null,
    brief: input.brief ?? '',
    createdBy: actor.userId,
  });
  return toProject(row);
}

async function detail(db: Db, project: typeof projects.$inferSelect): Promise<ProjectDetailOut> {
  const counts = await contentCounts(db, project.id);
  return {
    ...toProject(project),
    brief: project.brief,
    report_count: counts.reportCount,
    file_count: counts.fileCount,
  };
}

/** CONTRACT §10: the Project plus `brief`, `report_count`, `file_count`. */
export async function getProject(db: Db, actor: Actor, projectId: string): Promise<ProjectDetailOut> {
  const { project } = await requireProject(db, actor, projectId, 'read');
  return detail(db, project);
}

export async function updateProject(
  db: Db,
  actor: Actor,
  projectId: string,
  patch: { name?: string | undefined; description?: string | null | undefined; brief?: string | undefined },
): Promise<ProjectDetailOut> {
  await requireProject(db, actor, projectId, 'write');
  const [row] = await db
    .update(projects)
    .set({
      ...(patch.name !== undefined ? { name: patch.name } : {}),
      ...(patch.description !== undefined ? { description: patch.description } : {}),
      ...(patch.brief !== undefined ? { brief: patch.brief } : {}),
      updatedAt: new Date(),
    })
    .where(eq(projects.id, projectId))
    .returning();
  if (!row) throw notFound('project not found');
  return detail(db, row);
}

/** Deletes the project; its reports, files and shares go with it (foreign keys ON DELETE CASCADE). */
export async function deleteProject(db: Db, actor: Actor, projectId: string): Promise<{ deleted: true }> {
  await requireProject(db, actor, projectId, 'manage');
  const gone = await db.delete(projects).where(eq(projects.id, projectId)).returning({ id: projects.id });
  if (gone.length === 0) throw notFound('project not found');
  return { deleted: true };
}

/** Rule 3: `<name> (fork)`, then `<name> (fork 2)`, `(fork 3)`, … the first name not taken in the org. */
export function nextForkName(base: string, taken: Set<string>): string {
  if (!taken.has(`${base} (fork)`)) return `${base} (fork)`;
  for (let n = 2; ; n++) {
    const candidate = `${base} (fork ${n})`;
    if (!taken.has(candidate)) return candidate;
  }
}

/**
 * Rule 2 and 4: a point-in-time copy (brief, reports, files) as a new project, in ONE transaction, in
 * the source's client or another client where the caller may write. The source row is read FOR SHARE,
 * so a racing transfer waits for the copy (and the copy lands where the caller asked, consistently);
 * an advisory lock on the target org's names makes two racing forks pick distinct names.
 */
export async function forkProject(
  db: Db,
  actor: Actor,
  projectId: string,
  input: { name?: string | undefined; targetOrgKey?: string | undefined },
): Promise<ProjectOut> {
  const { project: source } = await requireProject(db, actor, projectId, 'read');
  const targetOrgKey = input.targetOrgKey ?? source.orgId;
  if (!canWriteOrg(await orgRoleOf(db, actor, targetOrgKey)))
    throw noAccess('you cannot create projects in the target client');
  const row = await transaction(db, async (tx) => {
    await lockOrgProjectNames(tx, targetOrgKey);
    const current = await findProject(tx, projectId, 'share');
    if (!current) throw notFound('project not found');
    const name =
      input.name ??
      nextForkName(current.name, await namesWithPrefix(tx, targetOrgKey, `${current.name} (fork`));
    const copy = await insertProject(tx, {
      orgId: targetOrgKey,
      name,
      description: current.description,
      brief: current.brief,
      createdBy: actor.userId,
      forkedFromId: current.id,
    });
    await copyReports(tx, current.id, copy.id);
    await copyFiles(tx, current.id, copy.id);
    return copy;
  });
  return toProject(row);
}

/**
 * Rule 5: re-points org_id (no copy) when the caller owns both clients. Reports, files and shares stay
 * with the project.
 */
export async function transferProject(
  db: Db,
  actor: Actor,
  projectId: string,
  targetOrgKey: string,
): Promise<ProjectOut> {
  const { project } = await requireProject(db, actor, projectId, 'read');
  const [sourceRole, targetRole] = await Promise.all([
    orgRoleOf(db, actor, project.orgId),
    orgRoleOf(db, actor, targetOrgKey),
  ]);
  if (sourceRole !== 'owner' || targetRole !== 'owner')
    throw noAccess('a transfer needs the owner of both clients');
  const row = await transaction(db, async (tx) => {
    const current = await findProject(tx, projectId, 'update');
    if (!current) throw notFound('project not found');
    // The project may have moved since the check above; the ownership rule applies to where it is now.
    if (current.orgId !== project.orgId && (await orgRoleOf(tx, actor, current.orgId)) !== 'owner') {
      throw noAccess('a transfer needs the owner of both clients');
    }
    const [moved] = await tx
      .update(projects)
      .set({ orgId: targetOrgKey, updatedAt: new Date() })
      .where(eq(projects.id, projectId))
      .returning();
    return moved!;
  });
  return toProject(row);
}
