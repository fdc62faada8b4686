import { Router, type ErrorRequestHandler, type Request, type Response } from 'express';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { Deps } from '../src/deps.js';
import { AppError } from '../src/http/errors.js';
import { jsonBody } from '../src/http/json-body.js';
import { rejectNulCharacters } from '../src/http/input-guard.js';
import { checkOrigin, requirePlatformGrant } from './guard.js';
import { buildPlatformServer, TOOL_NAMES } from './server.js';

// POST /mcp/platform (interface document: P = platform grant; CONTRACT §3, §7, §10). Stateless
// Streamable HTTP (MCP 2025-06-18 / 2025-11-25 "Transports"): every POST gets a server and a transport
// built from its verified grant, answers in JSON and is torn down when the response closes. Without
// sessions there is no server-initiated stream, so GET (and DELETE) answer 405, as the spec allows; but
// only to a caller with a grant: without one every method gets the 401 challenge first (issue 18 item 4),
// because clients that probe with GET (mcp-remote) discover the authorization server from it (RFC 9728 §5).

export const MCP_PATH = '/mcp/platform';
const MCP_BODY = jsonBody({ limit: '10mb' });

/** True for the MCP path, whose body the app's parser leaves to this router (read after the credential). */
export const isMcpPath = (path: string): boolean => {
  // Express routes ignore case and a trailing slash; so does this test.
  const p = path.toLowerCase();
  return p === MCP_PATH || p.startsWith(`${MCP_PATH}/`);
};

/** JSON-RPC error body for failures before the MCP layer (auth, origin, method). */
function rpcError(res: Response, status: number, message: string, code = -32001) {
  res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });
}

/** The tool named by a body that is one `tools/call` of one of our tools, else undefined. */
function singleToolCall(body: unknown): string | undefined {
  const msg = body as { method?: unknown; params?: { name?: unknown } } | null;
  if (!msg || Array.isArray(msg) || msg.method !== 'tools/call') return undefined;
  const name = msg.params?.name;
  return typeof name === 'string' && TOOL_NAMES.has(name) ? name : undefined;
}

export function mcpRoutes(deps: Deps): Router {
  const router = Router();

  // The grant is verified before the body is read (issue 22 item 2): a caller without one never gets a
  // 10 MB parse. Bodies are JSON, nesting-limited (src/http/json-body.ts), up to 10 MB (file writes).
  router.all(MCP_PATH, checkOrigin(deps), requirePlatformGrant(deps), (req, res, next) => {
    if (req.method === 'POST') return next();
    res.set('Allow', 'POST');
    rpcError(res, 405, 'Method not allowed: this server is stateless; POST JSON-RPC messages', -32000);
  });

  router.post(MCP_PATH, MCP_BODY, rejectNulCharacters(), async (req: Request, res: Response) => {
    const server = buildPlatformServer(deps, req.mcpGrant!, singleToolCall(req.body));
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, req.body);
  });

  router.use(MCP_PATH, mcpErrorHandler(deps));
  return router;
}

/**
 * Failures of this path answer in JSON-RPC with the status and WWW-Authenticate of the AppError, its body
 * parser's too (invalid JSON: -32700 Parse error, JSON-RPC 2.0 §5.1; too large; nested too deep). Also
 * mounted by the app for errors raised before this router (the NUL guard, an undecodable path).
 */
export function mcpErrorHandler(deps: Deps): ErrorRequestHandler {
  return (err, req, res, next) => {
    if (res.headersSent) return next(err);
    if (err instanceof AppError) {
      for (const [k, v] of Object.entries(err.extra.headers ?? {})) res.setHeader(k, v);
      rpcError(res, err.status, err.expose ? `${err.code}: ${err.message}` : 'internal error');
      return;
    }
    const status = (err as { status?: number }).status;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      rpcError(
        res,
        status,
        status === 400 ? 'Parse error' : 'Invalid request',
        status === 400 ? -32700 : -32600,
      );
      return;
    }
    deps.log.error({ err, reqId: req.id }, 'mcp request failed');
    rpcError(res, 500, 'internal error', -32603);
  };
}
