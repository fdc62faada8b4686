import { z } from 'zod';
import { route } from './describe.js';

// The authorization server (CONTRACT §7; RFC 6749, 7009, 7591, 7662, 8414, 8628, 8707, 9728) and the
// MCP platform resource. /oauth/* parses its forms with @node-oauth/oauth2-server and oauth/params.ts;
// the schemas below describe those forms as the RFCs name their fields.

const resource = z
  .string()
  .meta({ description: 'RFC 8707: {origin}/v1 (model) or {origin}/mcp/platform (platform); may repeat' });

const tokenForm = z.union([
  z.object({
    grant_type: z.literal('authorization_code'),
    code: z.string(),
    redirect_uri: z.string(),
    code_verifier: z.string(),
    client_id: z.string(),
    resource: resource.optional(),
  }),
  z.object({
    grant_type: z.literal('refresh_token'),
    refresh_token: z.string(),
    client_id: z.string(),
    resource: resource.optional(),
    scope: z.string().optional(),
  }),
  z.object({
    grant_type: z.literal('urn:ietf:params:oauth:grant-type:device_code'),
    device_code: z.string(),
    client_id: z.string(),
  }),
]);

export const tokenResponse = z
  .object({
    access_token: z.string(),
    token_type: z.literal('Bearer'),
    expires_in: z.number().int(),
    refresh_token: z.string().optional(),
    scope: z.string().optional(),
    grants: z
      .record(z.string(), z.unknown())
      .optional()
      .meta({ description: 'One access token per resource when several were granted (CONTRACT §7)' }),
  })
  .meta({ id: 'OAuthTokenResponse' });

const clientMetadata = z.looseObject({
  redirect_uris: z.array(z.string()),
  client_name: z.string().optional(),
  client_uri: z.string().optional(),
  grant_types: z.array(z.string()).optional(),
  response_types: z.array(z.string()).optional(),
  token_endpoint_auth_method: z.enum(['none', 'client_secret_basic', 'client_secret_post']).optional(),
  software_id: z.string().optional(),
  software_version: z.string().optional(),
});

const tokenParam = z.object({
  token: z.string(),
  token_type_hint: z.string().optional(),
  client_id: z.string().optional(),
  client_secret: z.string().optional(),
});

const asMetadata = z
  .looseObject({
    issuer: z.string(),
    authorization_endpoint: z.string(),
    token_endpoint: z.string(),
    device_authorization_endpoint: z.string(),
    registration_endpoint: z.string(),
    revocation_endpoint: z.string(),
    introspection_endpoint: z.string(),
    jwks_uri: z.string(),
    scopes_supported: z.array(z.string()),
  })
  .meta({ id: 'AuthorizationServerMetadata' });

const prMetadata = z
  .object({
    resource: z.string(),
    authorization_servers: z.array(z.string()),
    scopes_supported: z.array(z.string()),
    bearer_methods_supported: z.array(z.string()),
  })
  .meta({ id: 'ProtectedResourceMetadata' });

const authorizeQuery = z.object({
  response_type: z.literal('code'),
  client_id: z
    .string()
    .meta({ description: 'A registered id, or an https URL of a client metadata document' }),
  redirect_uri: z.string(),
  code_challenge: z.string(),
  code_challenge_method: z.literal('S256'),
  state: z.string().optional(),
  scope: z.string().optional(),
  resource: resource.optional(),
});

export const oauthRoutes = [
  route('get', '/.well-known/oauth-authorization-server', {
    summary: 'Authorization server metadata (RFC 8414); each origin is its own issuer',
    response: asMetadata,
  }),
  route('get', '/.well-known/oauth-protected-resource/v1', {
    summary: 'Protected resource metadata of the model resource (RFC 9728)',
    response: prMetadata,
  }),
  route('get', '/.well-known/oauth-protected-resource/mcp/platform', {
    summary: 'Protected resource metadata of the platform resource (RFC 9728)',
    response: prMetadata,
  }),
  route('get', '/.well-known/jwks.json', {
    summary: 'The public keys that sign access tokens (ES256)',
    response: z.object({ keys: z.array(z.looseObject({ kty: z.string(), kid: z.string().optional() })) }),
  }),
  route('get', '/oauth/authorize', {
    summary: 'The consent page (signs in first); a bad request is redirected to the client or shown',
    surface: 'page',
    query: authorizeQuery,
    response: 'html',
    extra: { '302': { description: 'To sign-in, or back to the client with an error' } },
  }),
  route('post', '/oauth/authorize', {
    summary: 'The consent decision (the page’s form, CSRF-checked)',
    auth: ['session'],
    surface: 'page',
    query: authorizeQuery,
    bodyType: 'form',
    body: z.object({
      decision: z.enum(['approve', 'deny']),
      client_id: z.string().optional().meta({ description: 'The organization to act for' }),
      csrf: z.string().optional(),
    }),
    response: 'redirect',
    errors: [403],
  }),
  route('post', '/oauth/token', {
    summary: 'Token endpoint: authorization code with PKCE, refresh (rotated), device code',
    auth: ['clientAuth'],
    bodyType: 'form',
    body: tokenForm,
    response: tokenResponse,
    errors: [401, 503],
  }),
  route('post', '/oauth/device_authorization', {
    summary: 'Device authorization (RFC 8628 §3.1)',
    auth: ['clientAuth'],
    bodyType: 'form',
    body: z.object({ client_id: z.string(), scope: z.string().optional(), resource: resource.optional() }),
    response: z.object({
      device_code: z.string(),
      user_code: z.string(),
      verification_uri: z.string(),
      verification_uri_complete: z.string(),
      expires_in: z.number().int(),
      interval: z.number().int(),
    }),
    errors: [401, 503],
  }),
  route('post', '/oauth/register', {
    summary: 'Dynamic client registration (RFC 7591)',
    body: clientMetadata,
    response: {
      '201': {
        description: 'Registered',
        content: {
          'application/json': {
            schema: clientMetadata.extend({
              client_id: z.string(),
              client_id_issued_at: z.number().int(),
              client_secret: z.string().optional(),
              client_secret_expires_at: z.number().int().optional(),
            }),
          },
        },
      },
    },
  }),
  route('post', '/oauth/revoke', {
    summary: 'Revoke a token (RFC 7009): 200 whether or not it was known',
    auth: ['clientAuth'],
    bodyType: 'form',
    body: tokenParam,
    response: { '200': { description: 'Revoked, or nothing to revoke' } },
    errors: [401],
  }),
  route('post', '/oauth/introspect', {
    summary: 'Token introspection (RFC 7662)',
    auth: ['clientAuth'],
    bodyType: 'form',
    body: tokenParam,
    response: z.union([
      z.object({ active: z.literal(false) }),
      z.object({
        active: z.literal(true),
        token_type: z.string(),
        scope: z.string(),
        client_id: z.string(),
        sub: z.string(),
        org: z.string(),
        iss: z.string(),
        exp: z.number().int(),
        iat: z.number().int(),
        aud: z.union([z.string(), z.array(z.string())]).optional(),
        jti: z.string().optional(),
      }),
    ]),
    errors: [401],
  }),

  ...['/mcp/platform', '/mcp/platform/readonly'].map((path) =>
    route('post', path, {
      summary:
        path === '/mcp/platform'
          ? 'The MCP server (streamable HTTP, stateless; revisions 2026-07-28 and 2025-11-25): projects, reports, files, shares'
          : 'The same MCP server, narrowed to its read-only tools',
      description:
        'Headers X-MCP-Toolsets (projects, reports, files, shares) and X-MCP-Readonly: true narrow the tools ' +
        '(CONTRACT §10). Other methods on this path answer 405 with Allow: POST.',
      auth: ['platformGrant'],
      body: z.looseObject({
        jsonrpc: z.literal('2.0'),
        method: z.string(),
        id: z.union([z.string(), z.number()]).optional(),
      }),
      response: z.looseObject({ jsonrpc: z.literal('2.0') }),
      errors: [400, 403, 405, 413],
    }),
  ),
];
