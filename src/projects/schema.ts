import { z } from 'zod';
import { pageFields } from '../http/pagination.js';
import { clientIdOf, parseOrgId, unix } from '../ids.js';
import type { projectFiles, projectReports, projects, projectShares } from '../db/schema.js';

// zod in and out for the project domain (STYLE: Edges). The MCP tools and the REST routes share these,
// so a tool's structuredContent has exactly the fields of the REST body (CONTRACT §10).

export const MAX_FILE_BYTES = 5 * 1024 * 1024; // CONTRACT §10: bytes ≤ 5 MB
export const PROJECT_QUOTA_BYTES = 50 * 1024 * 1024; // our decision: 50 MB of files per project

/** Either spelling of an organization id (CONTRACT §2) → the stored key. */
export const orgIdIn = z
  .string()
  .max(80)
  .transform((v, ctx) => {
    const key = parseOrgId(v);
    if (!key) {
      ctx.addIssue({ code: 'custom', message: 'expected a client_… or org_… id' });
      return z.NEVER;
    }
    return key;
  });

const idOf = (prefix: string) =>
  z.string().regex(new RegExp(`^${prefix}_[a-z0-9]{1,64}$`), `expected a ${prefix}_… id`);
export const projectIdIn = idOf('prj');
export const reportIdIn = idOf('rpt');
export const fileIdIn = idOf('fil');
export const shareIdIn = idOf('shr');

export const nameIn = z.string().trim().min(1).max(200);
export const descriptionIn = z.string().max(2000);
export const briefIn = z.string().max(200_000);
export const titleIn = z.string().trim().min(1).max(300);
export const bodyIn = z.string().max(1_000_000);

/** A file name within a project: relative, no empty, `.` or `..` segments, no control characters. */
export const pathIn = z
  .string()
  .min(1)
  .max(512)
  // eslint-disable-next-line no-control-regex -- control characters are what this refuses
  .refine((p) => !/[\u0000-\u001f\\]/.test(p), 'no control characters or backslashes')
  .refine(
    (p) => p.split('/').every((s) => s !== '' && s !== '.' && s !== '..'),
    'a relative path without empty, . or .. segments',
  );

export const mediaTypeIn = z
  .string()
  .max(200)
  .regex(
    /^[a-z0-9][a-z0-9!#$&^_.+-]*\/[a-z0-9][a-z0-9!#$&^_.+-]*(\s*;.*)?$/i,
    'a media type such as text/markdown',
  );

export const roleIn = z.enum(['viewer', 'editor']);

// ---- REST bodies -------------------------------------------------------------------------------

export const listQuery = z.object({ org_id: orgIdIn, ...pageFields });
export const createBody = z.object({
  org_id: orgIdIn,
  name: nameIn,
  description: descriptionIn.optional(),
  brief: briefIn.optional(),
});
export const updateBody = z
  .object({
    name: nameIn.optional(),
    description: descriptionIn.nullable().optional(),
    brief: briefIn.optional(),
  })
  .refine(
    (b) => b.name !== undefined || b.description !== undefined || b.brief !== undefined,
    'nothing to update',
  );
export const forkBody = z.object({ name: nameIn.optional(), target_org_id: orgIdIn.optional() });
export const transferBody = z.object({ target_org_id: orgIdIn });

// ---- Output shapes -----------------------------------------------------------------------------

export const projectOut = z.object({
  id: z.string(),
  org_id: z.string(),
  name: z.string(),
  description: z.string().nullable(),
  created_at: z.number().int(),
  updated_at: z.number().int(),
  forked_from_id: z.string().nullable(),
});
export type ProjectOut = z.infer<typeof projectOut>;

export const projectDetailOut = projectOut.extend({
  brief: z.string(),
  report_count: z.number().int(),
  file_count: z.number().int(),
});
export type ProjectDetailOut = z.infer<typeof projectDetailOut>;

export const reportSummaryOut = z.object({
  id: z.string(),
  project_id: z.string(),
  title: z.string(),
  created_at: z.number().int(),
  updated_at: z.number().int(),
});
export const reportOut = reportSummaryOut.extend({ body: z.string() });
export type ReportOut = z.infer<typeof reportOut>;

export const fileOut = z.object({
  id: z.string(),
  project_id: z.string(),
  path: z.string(),
  media_type: z.string(),
  size: z.number().int(),
  sha256: z.string(),
  created_at: z.number().int(),
  updated_at: z.number().int(),
});
export type FileOut = z.infer<typeof fileOut>;
export const fileContentOut = fileOut.extend({ encoding: z.enum(['utf8', 'base64']), content: z.string() });

export const shareOut = z.object({
  id: z.string(),
  project_id: z.string(),
  kind: z.enum(['user', 'link']),
  role: roleIn,
  user_id: z.string().nullable(),
  email: z.string().nullable(),
  created_at: z.number().int(),
  revoked_at: z.number().int().nullable(),
  /** The public link, only in the answer that created it (the token is stored hashed). */
  url: z.string().optional(),
});
export type ShareOut = z.infer<typeof shareOut>;

export const listOf = <T extends z.ZodType>(item: T) => z.object({ data: z.array(item) });

// ---- Presenters: rows → payloads (org ids in the client_… spelling, CONTRACT §2) -------------------

type ProjectRow = typeof projects.$inferSelect;
type ReportRow = typeof projectReports.$inferSelect;
type FileRow = Omit<typeof projectFiles.$inferSelect, 'content'>;
type ShareRow = typeof projectShares.$inferSelect;

export const toProject = (
  p: Pick<ProjectRow, 'id' | 'orgId' | 'name' | 'description' | 'createdAt' | 'updatedAt' | 'forkedFromId'>,
): ProjectOut => ({
  id: p.id,
  org_id: clientIdOf(p.orgId),
  name: p.name,
  description: p.description,
  created_at: unix(p.createdAt),
  updated_at: unix(p.updatedAt),
  forked_from_id: p.forkedFromId,
});

export const toReportSummary = (r: Omit<ReportRow, 'body'>) => ({
  id: r.id,
  project_id: r.projectId,
  title: r.title,
  created_at: unix(r.createdAt),
  updated_at: unix(r.updatedAt),
});
export const toReport = (r: ReportRow): ReportOut => ({ ...toReportSummary(r), body: r.body });

export const toFile = (f: FileRow): FileOut => ({
  id: f.id,
  project_id: f.projectId,
  path: f.path,
  media_type: f.mediaType,
  size: f.size,
  sha256: f.sha256,
  created_at: unix(f.createdAt),
  updated_at: unix(f.updatedAt),
});

export const toShare = (s: ShareRow, email: string | null): ShareOut => ({
  id: s.id,
  project_id: s.projectId,
  kind: s.kind,
  role: s.role,
  user_id: s.userId,
  email,
  created_at: unix(s.createdAt),
  revoked_at: unix(s.revokedAt),
});
