import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { ErrorCode, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import type { Deps } from '../src/deps.js';
import { AppError } from '../src/http/errors.js';
import { parseOrgId } from '../src/ids.js';
import { getReport } from '../src/projects/content.js';
import { listReportsInOrg } from '../src/projects/queries.js';
import type { McpGrant } from './guard.js';
import { toolError, type PlatformTool, type ToolContext } from './tool-kit.js';
import { projectTools } from './tools-projects.js';
import { contentTools } from './tools-content.js';
import { shareTools } from './tools-shares.js';

// The platform MCP server, built per request from the verified grant (stateless Streamable HTTP: no
// session, nothing kept in this process, so any process sharing the database can answer).

/** The twenty tools of CONTRACT §10, defined once per process (mcp/tool-kit.ts defineTool). */
const TOOLS: PlatformTool[] = [...projectTools, ...contentTools, ...shareTools];

export const TOOL_NAMES = new Set(TOOLS.map((t) => t.name));

/**
 * What the per-request servers share: the JSON Schema validator the SDK would otherwise build per server
 * (an Ajv instance with its formats: most of a server's construction cost; the SDK uses it only to check
 * elicitation answers, which this server never requests). It holds no request or caller state.
 */
const jsonSchemaValidator = new AjvJsonSchemaValidator();

export const REPORT_URI_PREFIX = 'svc://reports/';

/**
 * @param onlyTool when the request is a single `tools/call` of a known tool, only that tool is
 *   registered: the per-request server then skips registering 19 tools it would never use.
 */
export function buildPlatformServer(deps: Deps, grant: McpGrant, onlyTool?: string): McpServer {
  const server = new McpServer(
    { name: 'svc-platform', title: 'svc platform: projects, reports, files and sharing', version: '1.0.0' },
    {
      jsonSchemaValidator,
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
    actor: {
      userId: grant.userId,
      boundOrgKey: grant.boundOrgKey,
      readRole: { orgKey: grant.actingOrgKey, role: grant.actingRole },
    },
    grant,
    orgKeyOf(orgId) {
      if (orgId === undefined) return grant.actingOrgKey;
      const key = parseOrgId(orgId);
      if (!key) throw new AppError(400, 'VALIDATION_ERROR', 'org_id: expected a client_… or org_… id');
      return key;
    },
  };
  for (const tool of TOOLS) if (!onlyTool || tool.name === onlyTool) tool.register(server, ctx);
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
