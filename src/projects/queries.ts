import { and, asc, count, desc, eq, inArray, isNull, like, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import type { ReadLane } from '../db/lane.js';
import { isPersonId, projectFiles, projectReports, projects, projectShares, users } from '../db/schema.js';
import { newId } from '../ids.js';
import { unknownCursor, type Page } from '../http/pagination.js';

// Drizzle queries of the project domain. Each takes `db` (or a transaction) first (STYLE: Shape).

export type ProjectRow = typeof projects.$inferSelect;
export type ReportRow = typeof projectReports.$inferSelect;
export type ShareRow = typeof projectShares.$inferSelect;

/** Every column of a file except its bytes, for listings and metadata answers. */
export const fileMeta = {
  id: projectFiles.id,
  projectId: projectFiles.projectId,
  path: projectFiles.path,
  mediaType: projectFiles.mediaType,
  size: projectFiles.size,
  sha256: projectFiles.sha256,
  createdAt: projectFiles.createdAt,
  updatedAt: projectFiles.updatedAt,
};
export type FileMetaRow = Omit<typeof projectFiles.$inferSelect, 'content'>;

export async function findProject(
  db: Db,
  id: string,
  lock?: 'update' | 'share',
): Promise<ProjectRow | undefined> {
  const q = db.select().from(projects).where(eq(projects.id, id));
  const [row] = lock === 'update' ? await q.for('update') : lock === 'share' ? await q.for('share') : await q;
  return row;
}

/** The role of a live user share of the project, or null. */
export async function userShareRole(db: Db, projectId: string, userId: string) {
  const [row] = await db
    .select({ role: projectShares.role })
    .from(projectShares)
    .where(
      and(
        eq(projectShares.projectId, projectId),
        eq(projectShares.userId, userId),
        eq(projectShares.kind, 'user'),
        isNull(projectShares.revokedAt),
      ),
    );
  return row?.role ?? null;
}

/** The columns a listing shows (src/projects/schema.ts toProject): no brief. */
export type ProjectListRow = Pick<
  ProjectRow,
  'id' | 'orgId' | 'name' | 'description' | 'createdAt' | 'updatedAt' | 'forkedFromId'
>;

const ORG_PROJECTS_READ = `select id, org_id, name, description, created_at, updated_at, forked_from_id
  from projects where org_id = $1 order by created_at desc, id desc limit $2 offset $3`;

/**
 * listProjectsInOrg's common case, a page by offset of a member's organization (what an MCP client's
 * `list_projects` asks for), as a statement prepared once (src/db/lane.ts pooledRows) instead of one the
 * ORM builds, and the engine parses and plans, on every call: on PGlite, inside this process, that was
 * most of a call's CPU (bench/README.md, mcp). Same order and index as listProjectsInOrg.
 */
export async function orgProjectsPage(
  lane: ReadLane,
  orgKey: string,
  page: { limit: number; offset: number },
): Promise<ProjectListRow[]> {
  const rows = await lane.pooledRows('projects_org_page', ORG_PROJECTS_READ, [
    orgKey,
    page.limit,
    page.offset,
  ]);
  return rows.map(([id, orgId, name, description, createdAt, updatedAt, forkedFromId]) => ({
    id: id as string,
    orgId: orgId as string,
    name: name as string,
    description: description as string | null,
    createdAt: createdAt as Date,
    updatedAt: updatedAt as Date,
    forkedFromId: forkedFromId as string | null,
  }));
}

/**
 * One page of an organization's projects, newest first (created_at, then id), read in the order of
 * projects_org_idx so no page sorts the organization's projects. `startingAfter` is a
 * project of that organization (CONTRACT §3); 400 when it is not.
 */
export async function listProjectsInOrg(db: Db, orgKey: string, page: Page, sharedWith?: string) {
  const conditions: (SQL | undefined)[] = [eq(projects.orgId, orgKey)];
  if (sharedWith)
    conditions.push(
      inArray(
        projects.id,
        db
          .select({ id: projectShares.projectId })
          .from(projectShares)
          .where(
            and(
              eq(projectShares.userId, sharedWith),
              eq(projectShares.kind, 'user'),
              isNull(projectShares.revokedAt),
            ),
          ),
      ),
    );
  if (page.startingAfter !== undefined) {
    // The cursor must be an item of this very list (a shared-with reader's cursor among their shares).
    const [c] = await db
      .select({ id: projects.id })
      .from(projects)
      .where(and(eq(projects.id, page.startingAfter), ...conditions));
    if (!c) throw unknownCursor();
    // Its time read by the statement itself (a JS Date would drop PostgreSQL's microseconds); as a
    // subquery the planner estimates "a part of the list" and walks the index, where a literal time near
    // the end of a short list made it sort (test/scale/scale-plans.test.ts).
    conditions.push(
      sql`(${projects.createdAt}, ${projects.id}) < ((select c.created_at from projects c where c.id = ${c.id}), ${c.id})`,
    );
  }
  return db
    .select()
    .from(projects)
    .where(and(...conditions))
    .orderBy(desc(projects.createdAt), desc(projects.id))
    .limit(page.limit)
    .offset(page.offset);
}

export async function insertProject(
  db: Db,
  values: {
    orgId: string;
    name: string;
    description?: string | null;
    brief?: string;
    createdBy: string;
    forkedFromId?: string;
  },
): Promise<ProjectRow> {
  const [row] = await db
    .insert(projects)
    .values({ id: newId('prj'), ...values })
    .returning();
  return row!;
}

export async function contentCounts(db: Db, projectId: string) {
  const [[reports], [files]] = await Promise.all([
    db.select({ n: count() }).from(projectReports).where(eq(projectReports.projectId, projectId)),
    db.select({ n: count() }).from(projectFiles).where(eq(projectFiles.projectId, projectId)),
  ]);
  return { reportCount: Number(reports?.n ?? 0), fileCount: Number(files?.n ?? 0) };
}

/**
 * Serialises fork naming per target organization until the transaction ends, so two forks racing for
 * `<name> (fork)` see each other's insert (a transaction-scoped advisory lock; works on PGlite too).
 */
export async function lockOrgProjectNames(db: Db, orgKey: string): Promise<void> {
  await db.execute(sql`select pg_advisory_xact_lock(hashtext(${`svc.projects.names:${orgKey}`}))`);
}

/** Names in the org starting with `prefix` (LIKE metacharacters escaped). */
export async function namesWithPrefix(db: Db, orgKey: string, prefix: string): Promise<Set<string>> {
  const escaped = prefix.replace(/[\\%_]/g, (c) => `\\${c}`);
  const rows = await db
    .select({ name: projects.name })
    .from(projects)
    .where(and(eq(projects.orgId, orgKey), like(projects.name, `${escaped}%`)));
  return new Set(rows.map((r) => r.name));
}

/** Copies every report of one project into another, with new ids (fork, interface document rule 2). */
export async function copyReports(db: Db, fromProjectId: string, toProjectId: string): Promise<void> {
  const rows = await db.select().from(projectReports).where(eq(projectReports.projectId, fromProjectId));
  if (rows.length === 0) return;
  await db.insert(projectReports).values(
    rows.map((r) => ({
      id: newId('rpt'),
      projectId: toProjectId,
      title: r.title,
      body: r.body,
      createdAt: r.createdAt,
      updatedAt: r.updatedAt,
    })),
  );
}

/** Copies every file inside the database: the bytes never travel through this process. */
export async function copyFiles(db: Db, fromProjectId: string, toProjectId: string): Promise<void> {
  const ids = await db
    .select({ id: projectFiles.id })
    .from(projectFiles)
    .where(eq(projectFiles.projectId, fromProjectId));
  for (const { id } of ids) {
    await db.execute(sql`
      insert into project_files (id, project_id, path, media_type, size, sha256, content, created_at, updated_at)
      select ${newId('fil')}, ${toProjectId}, path, media_type, size, sha256, content, created_at, updated_at
      from project_files where id = ${id}`);
  }
}

export async function filesBytesExcept(db: Db, projectId: string, exceptPath: string): Promise<number> {
  const [row] = await db
    .select({ total: sql<string | number | null>`coalesce(sum(${projectFiles.size}), 0)` })
    .from(projectFiles)
    .where(and(eq(projectFiles.projectId, projectId), sql`${projectFiles.path} <> ${exceptPath}`));
  return Number(row?.total ?? 0);
}

export async function findUserByEmail(db: Db, email: string) {
  const [row] = await db
    .select({ id: users.id, email: users.email, verifiedAt: users.emailVerifiedAt })
    .from(users)
    .where(and(eq(users.email, email.trim().toLowerCase()), isPersonId(users.id)));
  return row;
}

/** Live shares of a project with the e-mail of a user share. */
export function listLiveShares(db: Db, projectId: string) {
  return db
    .select({ share: projectShares, email: users.email })
    .from(projectShares)
    .leftJoin(users, eq(users.id, projectShares.userId))
    .where(and(eq(projectShares.projectId, projectId), isNull(projectShares.revokedAt)))
    .orderBy(asc(projectShares.createdAt), asc(projectShares.id));
}

export async function findShare(db: Db, shareId: string) {
  const [row] = await db
    .select({ share: projectShares, email: users.email })
    .from(projectShares)
    .leftJoin(users, eq(users.id, projectShares.userId))
    .where(eq(projectShares.id, shareId));
  return row;
}

/** The project a live public link opens, or undefined (revoked or unknown: the page answers 404). */
export async function projectByLinkHash(db: Db, tokenHash: string): Promise<ProjectRow | undefined> {
  const [row] = await db
    .select({ project: projects })
    .from(projectShares)
    .innerJoin(projects, eq(projects.id, projectShares.projectId))
    .where(
      and(
        eq(projectShares.tokenHash, tokenHash),
        eq(projectShares.kind, 'link'),
        isNull(projectShares.revokedAt),
      ),
    );
  return row?.project;
}

/** The most recent reports of an org's projects (MCP resources/list), without bodies. */
export function listReportsInOrg(db: Db, orgKey: string, limit: number) {
  return db
    .select({
      id: projectReports.id,
      title: projectReports.title,
      projectId: projects.id,
      projectName: projects.name,
    })
    .from(projectReports)
    .innerJoin(projects, eq(projects.id, projectReports.projectId))
    .where(eq(projects.orgId, orgKey))
    .orderBy(desc(projectReports.updatedAt), asc(projectReports.id))
    .limit(limit);
}
