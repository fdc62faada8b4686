import { z } from 'zod';
import {
  bodyIn,
  fileContentOut,
  fileIdIn,
  fileOut,
  listOf,
  mediaTypeIn,
  pathIn,
  reportIdIn,
  reportOut,
  reportSummaryOut,
  titleIn,
} from '../src/projects/schema.js';
import {
  createReport,
  decodeContent,
  deleteFile,
  deleteReport,
  getReport,
  guessMediaType,
  listFiles,
  listReports,
  readFile,
  updateReport,
  writeFile,
} from '../src/projects/content.js';
import {
  CREATES,
  OVERWRITES,
  READ_ONLY,
  defineTool,
  type PlatformTool,
  pageArgs,
  projectIdArg,
  deletedOut,
} from './tool-kit.js';

// Report and file tools (CONTRACT §10): the `reports` and `files` toolsets.

const reportIdArg = reportIdIn.describe('rpt_… id of the report');
const fileIdArg = fileIdIn.describe('fil_… id of the file');
const pathArg = pathIn.describe('file name within the project, e.g. notes/plan.md');

export const reportTools: PlatformTool[] = [
  defineTool(
    'list_reports',
    {
      title: 'List reports',
      description: 'Reports of a project (titles and timestamps; get_report returns the body).',
      inputSchema: { project_id: projectIdArg, ...pageArgs },
      outputSchema: listOf(reportSummaryOut).shape,
      annotations: READ_ONLY,
    },
    async ({ deps, actor }, a) => ({
      data: await listReports(deps.db, actor, a.project_id, {
        limit: a.limit ?? 20,
        offset: a.offset ?? 0,
        startingAfter: a.starting_after,
      }),
    }),
  ),

  defineTool(
    'get_report',
    {
      title: 'Get a report',
      description: 'A report with its markdown body.',
      inputSchema: { report_id: reportIdArg, project_id: projectIdArg.optional() },
      outputSchema: reportOut.shape,
      annotations: READ_ONLY,
    },
    ({ deps, actor }, a) => getReport(deps.db, actor, a.report_id, a.project_id),
  ),

  defineTool(
    'create_report',
    {
      title: 'Create a report',
      description: 'Adds a markdown report to a project.',
      inputSchema: { project_id: projectIdArg, title: titleIn, body: bodyIn.optional().describe('markdown') },
      outputSchema: reportOut.shape,
      annotations: CREATES,
    },
    ({ deps, actor }, a) =>
      createReport(deps.db, actor, a.project_id, { title: a.title, body: a.body ?? '' }),
  ),

  defineTool(
    'update_report',
    {
      title: 'Update a report',
      description: 'Changes the title and/or markdown body of a report.',
      inputSchema: {
        report_id: reportIdArg,
        project_id: projectIdArg.optional(),
        title: titleIn.optional(),
        body: bodyIn.optional(),
      },
      outputSchema: reportOut.shape,
      annotations: OVERWRITES,
    },
    ({ deps, actor }, a) =>
      updateReport(deps.db, actor, a.report_id, { title: a.title, body: a.body, projectId: a.project_id }),
  ),

  defineTool(
    'delete_report',
    {
      title: 'Delete a report',
      description: 'Deletes a report.',
      inputSchema: { report_id: reportIdArg, project_id: projectIdArg.optional() },
      outputSchema: deletedOut,
      annotations: OVERWRITES,
    },
    ({ deps, actor }, a) => deleteReport(deps.db, actor, a.report_id, a.project_id),
  ),
];

export const fileTools: PlatformTool[] = [
  defineTool(
    'list_files',
    {
      title: 'List files',
      description: 'Files of a project (metadata: path, media type, size, sha-256).',
      inputSchema: { project_id: projectIdArg, ...pageArgs },
      outputSchema: listOf(fileOut).shape,
      annotations: READ_ONLY,
    },
    async ({ deps, actor }, a) => ({
      data: await listFiles(deps.db, actor, a.project_id, {
        limit: a.limit ?? 20,
        offset: a.offset ?? 0,
        startingAfter: a.starting_after,
      }),
    }),
  ),

  defineTool(
    'read_file',
    {
      title: 'Read a file',
      description:
        'A file and its content: utf8 for text that decodes cleanly, base64 otherwise. Name it by file_id or path.',
      inputSchema: { project_id: projectIdArg, file_id: fileIdArg.optional(), path: pathArg.optional() },
      outputSchema: fileContentOut.shape,
      annotations: READ_ONLY,
    },
    ({ deps, actor }, a) => readFile(deps.db, actor, a.project_id, { fileId: a.file_id, path: a.path }),
  ),

  defineTool(
    'write_file',
    {
      title: 'Write a file',
      description:
        'Creates or replaces the file at path (≤ 5 MB; 50 MB per project). content is utf8 text or base64.',
      inputSchema: {
        project_id: projectIdArg,
        path: pathArg,
        content: z.string().max(8 * 1024 * 1024),
        encoding: z.enum(['utf8', 'base64']).optional().describe('default utf8'),
        media_type: mediaTypeIn.optional().describe('default: guessed from the extension'),
      },
      outputSchema: fileOut.shape,
      annotations: OVERWRITES,
    },
    ({ deps, actor }, a) => {
      const encoding = a.encoding ?? 'utf8';
      const bytes = decodeContent(a.content, encoding);
      return writeFile(deps.db, actor, a.project_id, {
        path: a.path,
        bytes,
        mediaType: a.media_type ?? guessMediaType(a.path, encoding),
      });
    },
  ),

  defineTool(
    'delete_file',
    {
      title: 'Delete a file',
      description: 'Deletes a file, named by file_id or path.',
      inputSchema: { project_id: projectIdArg, file_id: fileIdArg.optional(), path: pathArg.optional() },
      outputSchema: deletedOut,
      annotations: OVERWRITES,
    },
    ({ deps, actor }, a) => deleteFile(deps.db, actor, a.project_id, { fileId: a.file_id, path: a.path }),
  ),
];
