import { sql } from 'drizzle-orm';
import { customType, index, integer, pgTable, text, timestamp, uniqueIndex } from 'drizzle-orm/pg-core';
import { users } from './accounts.js';
import { orgs } from './orgs.js';

// Projects and what lives in them (interface document: Project; CONTRACT §10). Reports, files and
// shares hang off a project with ON DELETE CASCADE, so deleting a project removes them in one statement.

/** File bytes live in PostgreSQL (≤ 5 MB each, CONTRACT §10); both drivers hand back a Uint8Array/Buffer. */
const bytea = customType<{ data: Buffer; driverData: Buffer | Uint8Array }>({
  dataType: () => 'bytea',
  fromDriver: (v) => (Buffer.isBuffer(v) ? v : Buffer.from(v)),
  toDriver: (v) => v,
});

export const projects = pgTable(
  'projects',
  {
    id: text('id').primaryKey(), // prj_…
    orgId: text('org_id')
      .notNull()
      .references(() => orgs.id),
    name: text('name').notNull(),
    description: text('description'),
    brief: text('brief').notNull().default(''),
    createdBy: text('created_by').references(() => users.id),
    forkedFromId: text('forked_from_id'),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  // The list's order with its tie-break (newest first: created_at, id), so a deep page is an index walk,
  // not a sort of every project of the organization.
  (t) => [index('projects_org_idx').on(t.orgId, t.createdAt, t.id)],
);

export const projectReports = pgTable(
  'project_reports',
  {
    id: text('id').primaryKey(), // rpt_…
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    title: text('title').notNull(),
    body: text('body').notNull().default(''),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [index('project_reports_project_idx').on(t.projectId, t.createdAt, t.id)],
);

export const projectFiles = pgTable(
  'project_files',
  {
    id: text('id').primaryKey(), // fil_…
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    path: text('path').notNull(),
    mediaType: text('media_type').notNull(),
    size: integer('size').notNull(),
    sha256: text('sha256').notNull(),
    content: bytea('content').notNull(),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    updatedAt: timestamp('updated_at', { withTimezone: true }).notNull().defaultNow(),
  },
  // A path names one file within a project: writing the same path replaces it.
  (t) => [uniqueIndex('project_files_path_idx').on(t.projectId, t.path)],
);

export const SHARE_ROLES = ['viewer', 'editor'] as const;
export type ShareRole = (typeof SHARE_ROLES)[number];

export const projectShares = pgTable(
  'project_shares',
  {
    id: text('id').primaryKey(), // shr_…
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    kind: text('kind', { enum: ['user', 'link'] }).notNull(),
    /** The registered user a `user` share is for. */
    userId: text('user_id').references(() => users.id),
    role: text('role', { enum: SHARE_ROLES }).notNull(),
    /** HMAC of a public link's token (a link is read-only); the token itself is shown once. */
    tokenHash: text('token_hash'),
    createdBy: text('created_by').references(() => users.id),
    createdAt: timestamp('created_at', { withTimezone: true }).notNull().defaultNow(),
    revokedAt: timestamp('revoked_at', { withTimezone: true }),
  },
  (t) => [
    index('project_shares_project_idx').on(t.projectId),
    uniqueIndex('project_shares_token_idx').on(t.tokenHash),
    // One live share per (project, user); sharing again changes the role.
    uniqueIndex('project_shares_one_per_user')
      .on(t.projectId, t.userId)
      .where(sql`${t.kind} = 'user' and ${t.revokedAt} is null`),
    index('project_shares_user_idx').on(t.userId),
  ],
);
