import { z } from 'zod';
import type { ZodOpenApiOperationObject, ZodOpenApiResponsesObject } from 'zod-openapi';
import { SESSION_COOKIE } from '../auth/session.js';
import type { ErrorCatalogue } from '../http/errors.js';
import { codesOf } from './error-codes.js';

// How a route is described in the OpenAPI document (docs/openapi.md). One `route(...)` call per route,
// in src/openapi/<surface>.ts, with the zod schemas the route itself parses its input with; the output
// schemas say what it answers. test/openapi/openapi-coverage.test.ts fails when a mounted route has no call here
// or a call names no mounted route; test/openapi/openapi-responses.test.ts validates real answers against them.

export type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

/** Who may call: each entry is one way in (OpenAPI security requirements are alternatives). */
export type Credential =
  | 'session' // the session cookie, or the session token as a bearer (CONTRACT §4)
  | 'token' // an svc_ API token (CONTRACT §6)
  | 'modelGrant' // an OAuth access token for the model resource {origin}/v1 (CONTRACT §7)
  | 'platformGrant' // an OAuth access token for the platform resource {origin}/mcp/platform
  | 'accountGrant' // an OAuth access token of {origin}/v1 with scope `account`: reads only (CONTRACT §7)
  | 'metricsToken' // the METRICS_TOKEN bearer of GET /metrics
  | 'clientAuth'; // OAuth client authentication at the token endpoint (or none for public clients)

/** The error shape of a surface (src/http/error-middleware.ts; CONTRACT §3). */
export type Surface = 'detail' | 'openai' | 'anthropic' | 'oauth' | 'jsonrpc' | 'page' | 'plain';

export interface RouteSpec {
  summary: string;
  description?: string;
  /** Ways in; none: a public route. */
  auth?: Credential[];
  /** Which error shape its failures take; by default read from the path (surfaceOfPath). */
  surface?: Surface;
  params?: z.ZodObject;
  query?: z.ZodObject;
  headers?: z.ZodObject;
  /** A JSON body (or form, with bodyType 'form'). */
  body?: z.ZodType;
  bodyType?: 'json' | 'form';
  /** The 200 answer: a zod schema (JSON), or 'html' for a page, or an explicit responses object. */
  response?: z.ZodType | 'html' | 'redirect' | ZodOpenApiResponsesObject;
  /** Statuses this route can fail with, beyond what its credentials and the surface imply. */
  errors?: number[];
  /** Extra documented answers (e.g. an SSE stream, a 400 body of its own). */
  extra?: ZodOpenApiResponsesObject;
  /** Shown only in DEV_MODE (the route answers 404 otherwise). */
  devOnly?: boolean;
  /** Set when one route serves more methods than it lists (router.all). */
  tags?: string[];
}

export interface DescribedRoute {
  method: Method;
  /** The path as Express mounts it (`/v1/clients/:client_id`). */
  path: string;
  spec: RouteSpec;
}

/** One route of the document: method, Express path, what it takes and answers. */
export function route(method: Method, path: string, spec: RouteSpec): DescribedRoute {
  return { method, path, spec };
}

/** `/v1/clients/:client_id` → `/v1/clients/{client_id}` (OpenAPI path templating). */
export const openApiPath = (expressPath: string): string =>
  expressPath.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, '{$1}');

const OPENAI_PATHS = [
  /^\/v1\/chat\//,
  /^\/v1\/models(\/|$)/,
  /^\/v1\/agents(\/|$)/,
  /^\/v1\/runs(\/|$)/,
  /^\/v1\/(responses|completions|embeddings|moderations|audio|images)(\/|$)/,
];

/** The surface a path belongs to, as the error middleware decides it. */
export function surfaceOfPath(path: string): Surface {
  if (path.startsWith('/oauth/')) return 'oauth';
  if (/^\/v1\/messages(\/|$)/.test(path)) return 'anthropic';
  if (OPENAI_PATHS.some((re) => re.test(path))) return 'openai';
  if (path.startsWith('/mcp/')) return 'jsonrpc';
  if (path === '/account' || path.startsWith('/account/') || path.startsWith('/s/')) return 'page';
  if (path.startsWith('/.well-known/') || path === '/healthz' || path === '/readyz') return 'plain';
  return 'detail';
}

// ---- Error envelopes, one per surface --------------------------------------------------------------

export const detailError = z
  .object({
    detail: z
      .object({
        code: z.string().meta({ description: 'A stable UPPER_SNAKE code (CONTRACT §3)' }),
        message: z.string(),
        errors: z
          .array(z.object({ path: z.string(), message: z.string() }))
          .optional()
          .meta({ description: 'On 400 VALIDATION_ERROR: one entry per field' }),
      })
      .catchall(z.unknown()),
  })
  .meta({
    id: 'DetailError',
    description: 'The error shape of the /v1 account, organization, billing and project routes',
    example: { detail: { code: 'NOT_FOUND', message: 'no such client' } },
  });

export const openAiError = z
  .object({
    error: z
      .object({
        message: z.string(),
        type: z.string(),
        code: z.string().nullable(),
        param: z.string().nullable(),
      })
      .catchall(z.unknown()),
  })
  .meta({
    id: 'OpenAIError',
    description: 'The error shape of the model routes (OpenAI-compatible)',
    example: {
      error: {
        message: 'not enough credits',
        type: 'insufficient_quota',
        code: 'insufficient_credits',
        param: null,
      },
    },
  });

export const anthropicError = z
  .object({
    type: z.literal('error'),
    error: z.object({ type: z.string(), message: z.string() }),
  })
  .meta({
    id: 'AnthropicError',
    description: 'The error shape of POST /v1/messages (Anthropic Messages API)',
    example: { type: 'error', error: { type: 'billing_error', message: 'not enough credits' } },
  });

export const oauthError = z.object({ error: z.string(), error_description: z.string().optional() }).meta({
  id: 'OAuthError',
  description: 'RFC 6749 §5.2 error response of /oauth/*',
  example: { error: 'invalid_grant', error_description: 'the refresh token is not valid' },
});

export const jsonRpcError = z
  .object({
    jsonrpc: z.literal('2.0'),
    id: z.union([z.string(), z.number(), z.null()]),
    error: z.object({ code: z.number().int(), message: z.string(), data: z.unknown().optional() }),
  })
  .meta({ id: 'JsonRpcError', description: 'A JSON-RPC 2.0 error (the MCP surface)' });

const ERROR_TEXT: Record<number, string> = {
  400: 'Bad request: the input failed validation',
  401: 'No valid credential',
  402: 'Not enough credits',
  403: 'The credential may not do this',
  404: 'Not found',
  409: 'Conflict with the current state',
  410: 'Gone: it existed and can no longer be used',
  413: 'Body too large',
  415: 'Unsupported content encoding',
  426: 'Upgrade required',
  429: 'Too many requests (Retry-After says when to retry)',
  503: 'A dependency is unavailable (Retry-After says when to retry)',
};

/** The status's meaning, then the codes it may carry, from the catalogues (src/openapi/error-codes.ts). */
function errorResponse(surface: Surface, status: number, domain: ErrorCatalogue | undefined) {
  const codes = codesOf(domain, surface, status);
  const description =
    (ERROR_TEXT[status] ?? `Error ${status}`) +
    (codes.length ? `. Codes: ${codes.map((c) => `\`${c.code}\` (${c.message})`).join('; ')}` : '');
  switch (surface) {
    case 'detail':
      return { description, content: { 'application/json': { schema: detailError } } };
    case 'openai':
      return { description, content: { 'application/json': { schema: openAiError } } };
    case 'anthropic':
      return { description, content: { 'application/json': { schema: anthropicError } } };
    case 'oauth':
      return { description, content: { 'application/json': { schema: oauthError } } };
    case 'jsonrpc':
      return { description, content: { 'application/json': { schema: jsonRpcError } } };
    case 'page':
      return { description, content: { 'text/html': { schema: z.string() } } };
    case 'plain':
      return { description, content: { 'application/json': { schema: detailError } } };
  }
}

// ---- Security -------------------------------------------------------------------------------------

export const securitySchemes = {
  sessionCookie: {
    type: 'apiKey',
    in: 'cookie',
    name: SESSION_COOKIE,
    description: 'The session cookie set by POST /v1/login (or the sign-in page)',
  },
  sessionBearer: {
    type: 'http',
    scheme: 'bearer',
    description: 'The session_token of POST /v1/login as a bearer token',
  },
  svcToken: {
    type: 'http',
    scheme: 'bearer',
    bearerFormat: 'svc_…',
    description: 'An API token (POST /v1/tokens or the device flow), bound to one organization',
  },
  metricsToken: {
    type: 'http',
    scheme: 'bearer',
    description: 'The METRICS_TOKEN of the deployment (docs/operations.md)',
  },
  oauth: {
    type: 'oauth2',
    description:
      'OAuth 2.1 with PKCE; `resource` (RFC 8707) names {origin}/v1 (scope model) or {origin}/mcp/platform (scope platform, or platform:read)',
    flows: {
      authorizationCode: {
        authorizationUrl: '/oauth/authorize',
        tokenUrl: '/oauth/token',
        refreshUrl: '/oauth/token',
        scopes: {
          model: 'the model resource {origin}/v1',
          platform: 'the platform resource {origin}/mcp/platform (MCP)',
          'platform:read': 'the platform resource, read-only tools only',
        },
      },
    },
  },
} as const;

function securityOf(auth: Credential[] | undefined) {
  if (!auth?.length) return [];
  const out: Record<string, string[]>[] = [];
  for (const a of auth) {
    if (a === 'session') out.push({ sessionCookie: [] }, { sessionBearer: [] });
    if (a === 'token') out.push({ svcToken: [] });
    if (a === 'modelGrant') out.push({ oauth: ['model'] });
    if (a === 'platformGrant') out.push({ oauth: ['platform'] });
    if (a === 'accountGrant') out.push({ oauth: ['account'] });
    if (a === 'metricsToken') out.push({ metricsToken: [] });
    if (a === 'clientAuth') out.push({});
  }
  return out;
}

/** The OpenAPI operation of a described route; `domain` is its domain's error catalogue. */
export function operationOf(r: DescribedRoute, domain?: ErrorCatalogue): ZodOpenApiOperationObject {
  const { spec } = r;
  const surface = spec.surface ?? surfaceOfPath(r.path);
  const names = [...r.path.matchAll(/:([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]!);
  const params =
    spec.params ??
    (names.length ? z.object(Object.fromEntries(names.map((n) => [n, z.string()]))) : undefined);

  const responses: ZodOpenApiResponsesObject = {};
  const answer = spec.response;
  if (answer === 'html') {
    responses['200'] = { description: 'An HTML page', content: { 'text/html': { schema: z.string() } } };
  } else if (answer === 'redirect') {
    responses['303'] = {
      description: 'Redirect (Location names where to go next)',
      headers: z.object({ location: z.string() }),
    };
  } else if (answer instanceof z.ZodType) {
    responses['200'] = { description: 'OK', content: { 'application/json': { schema: answer } } };
  } else if (answer) {
    Object.assign(responses, answer);
  }
  Object.assign(responses, spec.extra ?? {});

  const statuses = new Set(spec.errors ?? []);
  if (spec.body || spec.query || spec.params) statuses.add(400);
  // A credential can be missing or wrong (401), or valid but refused: an unverified e-mail, a removed
  // member, another organization (403).
  if (spec.auth?.length && !spec.auth.includes('clientAuth')) statuses.add(401).add(403);
  // Every API surface answers 503 with Retry-After while the database is out (src/db/outage.ts).
  if (surface !== 'page') statuses.add(503);
  const byStatus = responses as Record<string, unknown>;
  for (const status of [...statuses].sort())
    byStatus[String(status)] ??= errorResponse(surface, status, domain);

  const bodyType = spec.bodyType === 'form' ? 'application/x-www-form-urlencoded' : 'application/json';
  return {
    operationId: operationIdOf(r.method, r.path),
    summary: spec.summary,
    ...(spec.description ? { description: spec.description } : {}),
    tags: spec.tags ?? [tagOf(r.path)],
    ...(spec.auth === undefined ? { security: [] } : { security: securityOf(spec.auth) }),
    ...(params || spec.query || spec.headers
      ? {
          requestParams: {
            ...(params ? { path: params } : {}),
            ...(spec.query ? { query: spec.query } : {}),
            ...(spec.headers ? { header: spec.headers } : {}),
          },
        }
      : {}),
    ...(spec.body ? { requestBody: { content: { [bodyType]: { schema: spec.body } } } } : {}),
    responses,
  };
}

/**
 * A stable operationId from the method and the path, which are unique together: client generators name
 * their methods after it (OpenAPI 3.1 §4.8.10: unique, case-sensitive). `GET /v1/clients/:client_id/budget`
 * → `getV1ClientsByClientIdBudget`; `POST /.well-known/…` keeps its words, dots and dashes dropped.
 */
export function operationIdOf(method: Method, expressPath: string): string {
  const words = expressPath
    .split('/')
    .filter(Boolean)
    .flatMap((segment) =>
      segment.startsWith(':') ? ['by', ...segment.slice(1).split('_')] : segment.split(/[^A-Za-z0-9]+/),
    )
    .filter(Boolean);
  const camel = words.map((w) => w[0]!.toUpperCase() + w.slice(1)).join('');
  return method + (camel || 'Root');
}

function tagOf(path: string): string {
  if (path.startsWith('/oauth/') || path.startsWith('/.well-known/')) return 'OAuth';
  if (path.startsWith('/mcp/')) return 'MCP';
  if (path.startsWith('/account') || path.startsWith('/s/')) return 'Pages';
  if (path.startsWith('/dev/')) return 'Development (DEV_MODE only)';
  if (OPENAI_PATHS.some((re) => re.test(path))) return 'Models';
  if (/^\/v1\/(owner|webhooks)|\/(credits|subscription|invoices|payment-methods|billing)(\/|$)/.test(path))
    return 'Billing';
  if (path.startsWith('/v1/projects')) return 'Projects';
  if (path.startsWith('/v1/clients')) return 'Clients';
  if (path.startsWith('/v1/tokens') || path.startsWith('/v1/auth/')) return 'Tokens and device flow';
  if (path.startsWith('/v1/')) return 'Accounts';
  return 'Service';
}
