import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { ErrorCode, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { Deps } from '../src/deps.js';
import { AppError } from '../src/http/errors.js';
import { parseOrgId } from '../src/ids.js';
import { getReport } from '../src/projects/content.js';
import { listReportsInOrg } from '../src/projects/queries.js';
import type { McpGrant } from './guard.js';
import { toolError, type ToolContext, type ToolRegistry } from './tool-kit.js';
import { registerProjectTools } from './tools-projects.js';
import { registerContentTools } from './tools-content.js';
import { registerShareTools } from './tools-shares.js';

// The platform MCP server, built per request from the verified grant (stateless Streamable HTTP: no
// session, nothing kept in this process, so any process sharing the database can answer).

/** The twenty tools of CONTRACT §10. */
export const TOOL_NAMES = new Set([
  'list_projects',
  'get_project',
  'create_project',
  'update_project',
  'delete_project',
  'fork_project',
  'transfer_project',
  'list_reports',
  'get_report',
  'create_report',
  'update_report',
  'delete_report',
  'list_files',
  'read_file',
  'write_file',
  'delete_file',
  'share_project',
  'create_share_link',
  'list_shares',
  'revoke_share',
]);

export const REPORT_URI_PREFIX = 'svc://reports/';

/**
 * @param onlyTool when the request is a single `tools/call` of a known tool, only that tool is
 *   registered: the per-request server then skips building 19 schemas it would never use.
 */
export function buildPlatformServer(deps: Deps, grant: McpGrant, onlyTool?: string): McpServer {
  const server = new McpServer(
    { name: 'svc-platform', title: 'svc platform: projects, reports, files and sharing', version: '1.0.0' },
    {
      capabilities: { tools: {}, resources: {} },
      instructions:
        'Projects of your svc clients: briefs, markdown reports, files and sharing. org_id defaults to the acting client ' +
        '(x-svc-organisation or the one you chose at sign-in). Tool errors start with a code such as NO_ACCESS or NOT_FOUND.',
    },
  );
  // The SDK answers arguments that fail the input schema with its own isError text; prefix it with
  // our code so every failed tool's message starts with one (CONTRACT §10). createToolError is the
  // SDK's single hook for that text (private in its types; covered by test/mcp-tools.test.ts).
  (server as unknown as { createToolError(message: string): CallToolResult }).createToolError = (message) =>
    toolError(/validation/i.test(message) ? 'VALIDATION_ERROR' : 'INVALID_REQUEST', message);

  const ctx: ToolContext = {
    deps,
    actor: { userId: grant.userId, boundOrgKey: grant.boundOrgKey },
    grant,
    orgKeyOf(orgId) {
      if (orgId === undefined) return grant.actingOrgKey;
      const key = parseOrgId(orgId);
      if (!key) throw new AppError(400, 'VALIDATION_ERROR', 'org_id: expected a client_… or org_… id');
      return key;
    },
  };
  const tools: ToolRegistry = onlyTool
    ? {
        registerTool: ((name, config, cb) =>
          name === onlyTool ? server.registerTool(name, config, cb) : undefined) as McpServer['registerTool'],
      }
    : server;
  registerProjectTools(tools, ctx);
  registerContentTools(tools, ctx);
  registerShareTools(tools, ctx);
  if (!onlyTool) registerReportResources(server, ctx);
  return server;
}

/** Reports as resources (resources/list, resources/read) so editors can attach them as context. */
function registerReportResources(server: McpServer, ctx: ToolContext) {
  const template = new ResourceTemplate(`${REPORT_URI_PREFIX}{report_id}`, {
    list: async () => {
      const rows = await listReportsInOrg(ctx.deps.db, ctx.grant.actingOrgKey, 100);
      return {
        resources: rows.map((r) => ({
          uri: `${REPORT_URI_PREFIX}${r.id}`,
          name: r.id,
          title: `${r.projectName}: ${r.title}`,
          mimeType: 'text/markdown',
        })),
      };
    },
  });
  server.registerResource(
    'report',
    template,
    { title: 'Project report', description: 'A markdown report of a project', mimeType: 'text/markdown' },
    async (uri, variables) => {
      const reportId = String(variables.report_id ?? '');
      try {
        const report = await getReport(ctx.deps.db, ctx.actor, reportId);
        return {
          contents: [
            { uri: uri.href, mimeType: 'text/markdown', text: `# ${report.title}\n\n${report.body}` },
          ],
        };
      } catch (err) {
        if (err instanceof AppError && err.expose) {
          // MCP "Resources" error handling: -32002 for a resource that is not found (or not yours).
          throw new McpError(
            err.status === 404 ? -32002 : ErrorCode.InvalidParams,
            `${err.code}: ${err.message}`,
          );
        }
        throw err;
      }
    },
  );
}
