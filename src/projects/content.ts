import { createHash } from 'node:crypto';
import { and, asc, desc, eq, sql, type SQL } from 'drizzle-orm';
import type { Db } from '../db/client.js';
import { projectFiles, projectReports } from '../db/schema.js';
import { COMMON_ERRORS, errorOf, notFound } from '../http/errors.js';
import { PROJECT_ERRORS } from './errors.js';
import { newId } from '../ids.js';
import { unknownCursor, type Page } from '../http/pagination.js';
import { requireProject, type Actor, type Need } from './access.js';
import { fileMeta, filesBytesExcept, findProject } from './queries.js';
import {
  MAX_FILE_BYTES,
  PROJECT_QUOTA_BYTES,
  toFile,
  toReport,
  toReportSummary,
  type FileOut,
  type ReportOut,
} from './schema.js';
import { transaction } from '../db/transaction.js';

// Reports and files of a project (CONTRACT §10). Access is always decided on the owning project.

/**
 * A project's reports, newest first (created_at, then id: project_reports_project_idx's order, CONTRACT
 * §3); `startingAfter` is a report of this project.
 */
export async function listReports(db: Db, actor: Actor, projectId: string, page: Page) {
  await requireProject(db, actor, projectId, 'read');
  let after: SQL | undefined;
  if (page.startingAfter !== undefined) {
    const [c] = await db
      .select({ id: projectReports.id })
      .from(projectReports)
      .where(and(eq(projectReports.id, page.startingAfter), eq(projectReports.projectId, projectId)));
    if (!c) throw unknownCursor();
    // The cursor's time read in the statement (microseconds kept; see listProjectsInOrg).
    after = sql`(${projectReports.createdAt}, ${projectReports.id}) < ((select c.created_at from project_reports c where c.id = ${c.id}), ${c.id})`;
  }
  const rows = await db
    .select({
      id: projectReports.id,
      projectId: projectReports.projectId,
      title: projectReports.title,
      createdAt: projectReports.createdAt,
      updatedAt: projectReports.updatedAt,
    })
    .from(projectReports)
    .where(and(eq(projectReports.projectId, projectId), after))
    .orderBy(desc(projectReports.createdAt), desc(projectReports.id))
    .limit(page.limit)
    .offset(page.offset);
  return rows.map(toReportSummary);
}

/** The report and the access to its project; a project_id that is given must be the report's. */
async function requireReport(db: Db, actor: Actor, reportId: string, need: Need, projectId?: string) {
  const [row] = await db.select().from(projectReports).where(eq(projectReports.id, reportId));
  if (!row || (projectId && row.projectId !== projectId)) throw notFound('report not found');
  await requireProject(db, actor, row.projectId, need);
  return row;
}

export async function getReport(
  db: Db,
  actor: Actor,
  reportId: string,
  projectId?: string,
): Promise<ReportOut> {
  return toReport(await requireReport(db, actor, reportId, 'read', projectId));
}

export async function createReport(
  db: Db,
  actor: Actor,
  projectId: string,
  input: { title: string; body: string },
): Promise<ReportOut> {
  await requireProject(db, actor, projectId, 'write');
  const [row] = await db
    .insert(projectReports)
    .values({ id: newId('rpt'), projectId, title: input.title, body: input.body })
    .returning();
  return toReport(row!);
}

export async function updateReport(
  db: Db,
  actor: Actor,
  reportId: string,
  patch: { title?: string | undefined; body?: string | undefined; projectId?: string | undefined },
): Promise<ReportOut> {
  await requireReport(db, actor, reportId, 'write', patch.projectId);
  const [row] = await db
    .update(projectReports)
    .set({
      ...(patch.title !== undefined ? { title: patch.title } : {}),
      ...(patch.body !== undefined ? { body: patch.body } : {}),
      updatedAt: new Date(),
    })
    .where(eq(projectReports.id, reportId))
    .returning();
  if (!row) throw notFound('report not found');
  return toReport(row);
}

export async function deleteReport(
  db: Db,
  actor: Actor,
  reportId: string,
  projectId?: string,
): Promise<{ deleted: true }> {
  await requireReport(db, actor, reportId, 'write', projectId);
  await db.delete(projectReports).where(eq(projectReports.id, reportId));
  return { deleted: true };
}

// ---- Files ---------------------------------------------------------------------------------------

/**
 * A project's files by path (a directory listing, the one list not ordered by time: the path names the
 * file, project_files_path_idx has that order); `startingAfter` is a file id of this project.
 */
export async function listFiles(db: Db, actor: Actor, projectId: string, page: Page): Promise<FileOut[]> {
  await requireProject(db, actor, projectId, 'read');
  let after: SQL | undefined;
  if (page.startingAfter !== undefined) {
    const [c] = await db
      .select({ path: projectFiles.path })
      .from(projectFiles)
      .where(and(eq(projectFiles.id, page.startingAfter), eq(projectFiles.projectId, projectId)));
    if (!c) throw unknownCursor();
    after = sql`${projectFiles.path} > ${c.path}`;
  }
  const rows = await db
    .select(fileMeta)
    .from(projectFiles)
    .where(and(eq(projectFiles.projectId, projectId), after))
    .orderBy(asc(projectFiles.path))
    .limit(page.limit)
    .offset(page.offset);
  return rows.map(toFile);
}

export type FileRef = { fileId?: string | undefined; path?: string | undefined };

async function findFile(db: Db, projectId: string, ref: FileRef) {
  if (!ref.fileId && !ref.path)
    throw errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', 'name the file with file_id or path');
  const [row] = await db
    .select()
    .from(projectFiles)
    .where(
      and(
        eq(projectFiles.projectId, projectId),
        ref.fileId ? eq(projectFiles.id, ref.fileId) : undefined,
        ref.path ? eq(projectFiles.path, ref.path) : undefined,
      ),
    );
  if (!row) throw notFound('file not found');
  return row;
}

const TEXTUAL = /^(text\/|application\/(json|xml|javascript|x-yaml|yaml|toml|csv)|image\/svg\+xml)/;

/** Text is answered as utf8 when it decodes cleanly; anything else as base64. */
export async function readFile(db: Db, actor: Actor, projectId: string, ref: FileRef) {
  await requireProject(db, actor, projectId, 'read');
  const row = await findFile(db, projectId, ref);
  const text = TEXTUAL.test(row.mediaType) ? new TextDecoder('utf-8', { fatal: true }) : null;
  let content: string;
  let encoding: 'utf8' | 'base64' = 'base64';
  try {
    if (!text) throw new Error('binary');
    content = text.decode(row.content);
    encoding = 'utf8';
  } catch {
    content = row.content.toString('base64');
  }
  return { ...toFile(row), encoding, content };
}

const EXTENSION_TYPES: Record<string, string> = {
  md: 'text/markdown',
  markdown: 'text/markdown',
  txt: 'text/plain',
  csv: 'text/csv',
  html: 'text/html',
  json: 'application/json',
  yaml: 'application/yaml',
  yml: 'application/yaml',
  svg: 'image/svg+xml',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  pdf: 'application/pdf',
};

export function guessMediaType(path: string, encoding: 'utf8' | 'base64'): string {
  const ext = /\.([a-z0-9]+)$/i.exec(path)?.[1]?.toLowerCase();
  return (ext && EXTENSION_TYPES[ext]) || (encoding === 'utf8' ? 'text/plain' : 'application/octet-stream');
}

export function decodeContent(content: string, encoding: 'utf8' | 'base64'): Buffer {
  if (encoding === 'utf8') return Buffer.from(content, 'utf8');
  if (!/^[A-Za-z0-9+/\-_]*={0,2}$/.test(content.replace(/\s+/g, ''))) {
    throw errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', 'content is not valid base64');
  }
  return Buffer.from(content, 'base64');
}

/**
 * Writes (creates or replaces) the file at `path`. ≤ 5 MB a file and 50 MB a project (the project row
 * is locked, so two writes cannot both slip under the quota).
 */
export async function writeFile(
  db: Db,
  actor: Actor,
  projectId: string,
  input: { path: string; bytes: Buffer; mediaType: string },
): Promise<FileOut> {
  if (input.bytes.length > MAX_FILE_BYTES) throw errorOf(PROJECT_ERRORS, 'FILE_TOO_LARGE');
  await requireProject(db, actor, projectId, 'write');
  const sha256 = createHash('sha256').update(input.bytes).digest('hex');
  const row = await transaction(db, async (txRaw) => {
    const tx = txRaw;
    if (!(await findProject(tx, projectId, 'update'))) throw notFound('project not found');
    const others = await filesBytesExcept(tx, projectId, input.path);
    if (others + input.bytes.length > PROJECT_QUOTA_BYTES) {
      throw errorOf(PROJECT_ERRORS, 'QUOTA_EXCEEDED');
    }
    const now = new Date();
    const [written] = await tx
      .insert(projectFiles)
      .values({
        id: newId('fil'),
        projectId,
        path: input.path,
        mediaType: input.mediaType,
        size: input.bytes.length,
        sha256,
        content: input.bytes,
      })
      .onConflictDoUpdate({
        target: [projectFiles.projectId, projectFiles.path],
        set: {
          mediaType: input.mediaType,
          size: input.bytes.length,
          sha256,
          content: input.bytes,
          updatedAt: now,
        },
      })
      .returning(fileMeta);
    return written!;
  });
  return toFile(row);
}

export async function deleteFile(
  db: Db,
  actor: Actor,
  projectId: string,
  ref: FileRef,
): Promise<{ deleted: true }> {
  await requireProject(db, actor, projectId, 'write');
  const row = await findFile(db, projectId, ref);
  await db.delete(projectFiles).where(eq(projectFiles.id, row.id));
  return { deleted: true };
}
