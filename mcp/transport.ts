import type { Request, Response } from 'express';
import {
  createMcpHandler,
  isLegacyRequest,
  WebStandardStreamableHTTPServerTransport,
  type AuthInfo,
} from '@modelcontextprotocol/server';
import type { Deps } from '../src/deps.js';
import { requestOrigin } from '../src/http/origin.js';
import { buildPlatformServer, type PlatformRequest } from './server.js';
import { toolError } from './tool-kit.js';

// The official SDK's serving entries behind svc's own HTTP layer (CONTRACT §10 "Protocol revisions").
// A request carrying the 2026-07-28 envelope goes to createMcpHandler, which validates the envelope and
// the MCP-Protocol-Version / Mcp-Method / Mcp-Name headers and answers statelessly. Any other request is
// a 2025-era one (the `initialize` handshake and the calls after it) and is answered by a per-request
// Streamable HTTP transport without sessions, in JSON, as before. Both build their server with the same
// factory from the request's verified grant and tool selection, which travel in the SDK's pass-through
// AuthInfo; the body was parsed (after the credential) by the route and is handed over parsed.

const PLATFORM_REQUEST = 'svcPlatformRequest';

export interface McpExchange {
  request: PlatformRequest;
  /** The body is one `tools/call` naming a tool outside the selection. */
  unknownTool: boolean;
}

export type McpAnswer = (req: Request, res: Response, exchange: McpExchange) => Promise<void>;

export function mcpAnswer(deps: Deps): McpAnswer {
  const factory = ({ authInfo }: { authInfo?: AuthInfo }) =>
    buildPlatformServer(deps, authInfo!.extra![PLATFORM_REQUEST] as PlatformRequest);
  const modern = createMcpHandler(factory, {
    legacy: 'reject',
    onerror: (err) => deps.log.debug({ err }, 'mcp exchange refused or failed'),
  });

  async function legacy(
    request: globalThis.Request,
    body: unknown,
    authInfo: AuthInfo,
    exchange: McpExchange,
  ) {
    const server = factory({ authInfo });
    const transport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
    });
    await server.connect(transport);
    try {
      const answer = await transport.handleRequest(request, { authInfo, parsedBody: body });
      return exchange.unknownTool ? await unknownToolAsToolError(answer) : answer;
    } finally {
      void transport.close();
      void server.close();
    }
  }

  return async (req, res, exchange) => {
    const aborted = new AbortController();
    // A client that hangs up aborts the exchange; a response that was sent in full has nothing to abort
    // (an abort builds an AbortError for every listener, on every request).
    res.on('close', () => {
      if (!res.writableFinished) aborted.abort();
    });
    const request = webRequestOf(req, requestOrigin(req, deps.config), aborted.signal);
    const authInfo: AuthInfo = {
      token: '',
      clientId: exchange.request.grant.clientId,
      scopes: [],
      extra: { [PLATFORM_REQUEST]: exchange.request },
    };
    const answer =
      !claimsModernEnvelope(req.body) && (await isLegacyRequest(request, req.body))
        ? await legacy(request, req.body, authInfo, exchange)
        : await modern.fetch(request, { authInfo, parsedBody: req.body });
    await send(res, answer);
  };
}

const PROTOCOL_VERSION_META_KEY = 'io.modelcontextprotocol/protocolVersion';

/**
 * True for a body the SDK's classification (isLegacyRequest) can only route to the 2026-07-28 serving: one
 * JSON-RPC request or notification, not `initialize`, whose `params._meta` carries the protocol-version
 * claim (an invalid claim or a header mismatch is a rejection, which that serving answers too). Such a
 * body skips isLegacyRequest, which classifies the whole body once more before createMcpHandler does
 * (docs/decisions/0100-mcp-path-mounted-first.md); any other body asks it.
 */
function claimsModernEnvelope(body: unknown): boolean {
  if (!isPlainObject(body) || 'result' in body || 'error' in body) return false;
  if (typeof body.method !== 'string' || body.method === 'initialize') return false;
  const meta = isPlainObject(body.params) ? body.params._meta : undefined;
  return isPlainObject(meta) && PROTOCOL_VERSION_META_KEY in meta;
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === 'object' && !Array.isArray(value);

/**
 * The 2025-era answer to a tool that is not there stays what it was before this SDK: a tool result whose
 * text starts with INVALID_REQUEST (CONTRACT §10; 2026-07-28 prescribes the JSON-RPC error -32602, which
 * that revision gets).
 */
async function unknownToolAsToolError(answer: globalThis.Response): Promise<globalThis.Response> {
  if (answer.status !== 200 || !answer.headers.get('content-type')?.includes('application/json'))
    return answer;
  const body = (await answer.json()) as { id?: unknown; error?: { code?: number; message?: string } };
  const rewritten =
    body.error?.code === -32602
      ? {
          jsonrpc: '2.0',
          id: body.id,
          result: toolError('INVALID_REQUEST', body.error.message ?? 'unknown tool'),
        }
      : body;
  return new Response(JSON.stringify(rewritten), { status: answer.status, headers: answer.headers });
}

/** The web Request the SDK reads: method, URL and headers; the body is passed parsed beside it. */
function webRequestOf(req: Request, origin: string, signal: AbortSignal): globalThis.Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined || name === 'content-length' || name === 'transfer-encoding') continue;
    if (Array.isArray(value)) for (const v of value) headers.append(name, v);
    else headers.set(name, value);
  }
  return new Request(`${origin}${req.originalUrl}`, { method: req.method, headers, signal });
}

async function send(res: Response, answer: globalThis.Response): Promise<void> {
  res.status(answer.status);
  answer.headers.forEach((value, name) => {
    if (name !== 'content-length') res.setHeader(name, value);
  });
  // A JSON answer (every answer of this stateless server but an event stream) is one buffer; only a
  // stream is relayed chunk by chunk.
  if (!answer.body) res.end();
  else if (answer.headers.get('content-type')?.startsWith('application/json'))
    res.end(Buffer.from(await answer.arrayBuffer()));
  else {
    for await (const chunk of answer.body) res.write(chunk);
    res.end();
  }
}
