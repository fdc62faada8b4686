import {
  McpServer,
  ProtocolError,
  ResourceTemplate,
  type CallToolResult,
} from '@modelcontextprotocol/server';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/server/validators/ajv';
import type { Deps } from '../src/deps.js';
import { AppError, COMMON_ERRORS, errorOf } from '../src/http/errors.js';
import { parseOrgId } from '../src/ids.js';
import { getReport } from '../src/projects/content.js';
import { listReportsInOrg } from '../src/projects/queries.js';
import type { McpGrant } from './guard.js';
import { toolError, type PlatformTool, type ToolContext } from './tool-kit.js';

// The platform MCP server, built per request from the verified grant and the request's tool selection
// (stateless: no session, nothing kept in this process, so any process sharing the database can
// answer). The same factory serves both protocol revisions (CONTRACT §10 "Protocol revisions").

/** What one request's server is built from. */
export interface PlatformRequest {
  grant: McpGrant;
  /** The tools to register: what `tools/list` shows, or only the tool a `tools/call` names. */
  tools: readonly PlatformTool[];
  /** Reports as resources; left out when the request is one `tools/call`. */
  resources: boolean;
}

/** The revisions /mcp/platform serves: 2026-07-28 statelessly, 2025-11-25 through `initialize`. */
export const SERVED_PROTOCOL_VERSIONS = ['2026-07-28', '2025-11-25'] as const;

/**
 * What the per-request servers share: the JSON Schema validator the SDK would otherwise build per server
 * (an Ajv instance with its formats; the SDK uses it only to check elicitation answers, which this server
 * never requests). It holds no request or caller state.
 */
const jsonSchemaValidator = new AjvJsonSchemaValidator();

const FIVE_MINUTES = 5 * 60 * 1000;

/**
 * Caching hints of the 2026-07-28 revision ("Caching"), saying what is true here: the tool list depends
 * on the grant's scope and the request's selection (private to the caller) and changes only when svc is
 * upgraded; reports change with every write, so their list and contents are stale at once; the
 * resource template and the discovery answer are the same for everyone.
 */
const CACHE_HINTS = {
  'tools/list': { ttlMs: FIVE_MINUTES, cacheScope: 'private' },
  'resources/list': { ttlMs: 0, cacheScope: 'private' },
  'resources/read': { ttlMs: 0, cacheScope: 'private' },
  'resources/templates/list': { ttlMs: FIVE_MINUTES, cacheScope: 'public' },
  'prompts/list': { ttlMs: FIVE_MINUTES, cacheScope: 'public' },
  'server/discover': { ttlMs: FIVE_MINUTES, cacheScope: 'public' },
} as const;

export const REPORT_URI_PREFIX = 'svc://reports/';

/** SDK internals this server adjusts; private in the SDK's types (test/mcp/mcp-revisions.test.ts covers both). */
interface SdkHooks {
  createToolError(message: string): CallToolResult;
  server: { _ondiscover(): { supportedVersions: string[] } };
}

export function buildPlatformServer(deps: Deps, request: PlatformRequest): McpServer {
  const { grant } = request;
  const server = new McpServer(
    { name: 'svc-platform', title: 'svc platform: projects, reports, files and sharing', version: '1.0.0' },
    {
      jsonSchemaValidator,
      // No prompts, but the capability with an empty list, so prompts/list answers (with its caching
      // hints) rather than -32601.
      capabilities: {
        tools: { listChanged: false },
        resources: { listChanged: false },
        prompts: { listChanged: false },
      },
      cacheHints: CACHE_HINTS,
      instructions:
        'Projects of your svc clients: briefs, markdown reports, files and sharing. org_id defaults to the acting client ' +
        '(x-svc-organisation or the one you chose at sign-in). Tool errors start with a code such as NO_ACCESS or NOT_FOUND.',
    },
  );
  const hooks = server as unknown as SdkHooks;
  // The SDK answers arguments that fail the input schema with its own isError text; prefix it with our
  // code so every failed tool's message starts with one (CONTRACT §10). createToolError is the SDK's
  // single hook for that text.
  hooks.createToolError = (message) =>
    toolError(/validation/i.test(message) ? 'VALIDATION_ERROR' : 'INVALID_REQUEST', message);
  // server/discover lists both revisions this endpoint serves (the SDK lists only the stateless ones).
  const discover = hooks.server._ondiscover.bind(hooks.server);
  hooks.server._ondiscover = () => ({ ...discover(), supportedVersions: [...SERVED_PROTOCOL_VERSIONS] });

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
      if (!key) throw errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', 'org_id: expected a client_… or org_… id');
      return key;
    },
  };
  for (const tool of request.tools) tool.register(server, ctx);
  if (request.resources) registerReportResources(server, ctx);
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
          // A report that is not there is "resource not found": -32002 in 2025-11-25, which the SDK
          // answers as -32602 in 2026-07-28, as that revision prescribes. Other refusals: -32602.
          const code = err.status === 404 ? -32002 : -32602;
          throw new ProtocolError(code, `${err.code}: ${err.message}`, { uri: uri.href });
        }
        throw err;
      }
    },
  );
}
