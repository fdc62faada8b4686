import { Router, type ErrorRequestHandler, type Request, type Response } from 'express';
import type { Deps } from '../src/deps.js';
import { AppError } from '../src/http/errors.js';
import { jsonBody } from '../src/http/json-body.js';
import { rejectNulCharacters } from '../src/http/input-guard.js';
import { checkOrigin, insufficientScope, requirePlatformGrant } from './guard.js';
import { READONLY_SUFFIX, selectionOf } from './selection.js';
import { mcpAnswer, type McpExchange } from './transport.js';

// POST /mcp/platform and /mcp/platform/readonly (interface document: P = platform grant; CONTRACT §3,
// §7, §10). Stateless: every POST is answered by a server built from its verified grant and its tool
// selection, in either protocol revision (mcp/transport.ts), and nothing outlives the response. Without
// sessions there is no server-initiated stream, so GET (and DELETE) answer 405, as the 2025-11-25
// transport allows; but only to a caller with a grant: without one every method gets the 401 challenge
// first, because clients that probe with GET (mcp-remote) discover the authorization server from it
// (RFC 9728 §5).

export const MCP_PATH = '/mcp/platform';
const MCP_PATHS = [MCP_PATH, `${MCP_PATH}${READONLY_SUFFIX}`];
const MCP_BODY = jsonBody({ limit: '10mb' });

/** True for the MCP path, whose body the app's parser leaves to this router (read after the credential). */
export const isMcpPath = (path: string): boolean => {
  // Express routes ignore case and a trailing slash; so does this test.
  const p = path.toLowerCase();
  return p === MCP_PATH || p.startsWith(`${MCP_PATH}/`);
};

/** JSON-RPC error body for failures before the MCP layer (auth, origin, method, selection). */
function rpcError(res: Response, status: number, message: string, code = -32001) {
  res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });
}

/** The tool named by a body that is one `tools/call`, else undefined. */
function calledTool(body: unknown): string | undefined {
  const msg = body as { method?: unknown; params?: { name?: unknown } } | null;
  if (!msg || Array.isArray(msg) || msg.method !== 'tools/call') return undefined;
  const name = msg.params?.name;
  return typeof name === 'string' ? name : undefined;
}

/**
 * What this request's server is built with: the selection's tools (a `tools/call` registers only the
 * tool it names, so the per-request server skips the others); a `platform:read` grant calling a tool
 * that writes is refused with the step-up 403 before any server is built (CONTRACT §10).
 */
function exchangeOf(req: Request): McpExchange {
  const grant = req.mcpGrant!;
  const selection = selectionOf(req, grant.readOnly);
  const name = calledTool(req.body);
  if (name === undefined)
    return { request: { grant, tools: selection.listed, resources: true }, unknownTool: false };
  const tool = selection.callable.find((t) => t.name === name);
  if (tool && grant.readOnly && !tool.readOnly)
    throw insufficientScope(grant.origin, `${name} changes data: it needs the "platform" scope`);
  return { request: { grant, tools: tool ? [tool] : [], resources: false }, unknownTool: !tool };
}

export function mcpRoutes(deps: Deps): Router {
  const router = Router();
  const answer = mcpAnswer(deps);

  // The grant is verified before the body is read: a caller without one never gets a 10 MB parse.
  // Bodies are JSON, nesting-limited (src/http/json-body.ts), up to 10 MB (file writes).
  for (const path of MCP_PATHS) {
    router.all(path, checkOrigin(deps), requirePlatformGrant(deps), (req, res, next) => {
      if (req.method === 'POST') return next();
      res.set('Allow', 'POST');
      rpcError(res, 405, 'Method not allowed: this server is stateless; POST JSON-RPC messages', -32000);
    });
    router.post(path, MCP_BODY, rejectNulCharacters(), async (req: Request, res: Response) => {
      await answer(req, res, exchangeOf(req));
    });
  }

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
      const message = err.expose ? `${err.code}: ${err.message}` : 'internal error';
      rpcError(res, err.status, message, err.status === 400 ? -32600 : -32001);
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
