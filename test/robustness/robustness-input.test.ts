import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import fc from 'fast-check';
import { randomBytes } from 'node:crypto';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { pool, rawRequest, type RawResult } from '../helpers/raw-http.js';
import { issueSession } from '../../src/auth/session.js';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { at, detailError, has, readJson } from '../helpers/json.js';

// "Bad input gets a clear 4xx in the contract's error shape, never a 500, and loses nothing"
// (CONTRACT §3; STYLE: Errors). Every route in one table, driven with hostile path parameters, bodies,
// content types and query strings, signed in (so validation is reached) and not. The assertions: no
// 5xx, and every 4xx in its surface's shape. Afterwards the signed-in user's state is intact.

type AuthKind = 'session' | 'token' | 'model' | 'platform' | 'page' | 'none';
// Each group drives dozens of routes with hostile input: on a busy shared machine that takes over 30 s.
vi.setConfig({ testTimeout: 120_000 });

interface Route {
  method: string;
  path: string;
  auth: AuthKind;
  /** The call ends the credential (sign-out): signed-in runs get a fresh session per request. */
  consumes?: boolean;
  /** Only malformed ids in path parameters: with the real ones any body would destroy real rows. */
  writes?: boolean;
}

const ROUTES: Route[] = [
  // health, metadata
  { method: 'GET', path: '/healthz', auth: 'none' },
  { method: 'GET', path: '/readyz', auth: 'none' },
  { method: 'GET', path: '/.well-known/oauth-authorization-server', auth: 'none' },
  { method: 'GET', path: '/.well-known/oauth-protected-resource/mcp/platform', auth: 'none' },
  { method: 'GET', path: '/.well-known/oauth-protected-resource/v1', auth: 'none' },
  { method: 'GET', path: '/.well-known/jwks.json', auth: 'none' },
  { method: 'GET', path: '/dev/mail', auth: 'none' },
  { method: 'GET', path: '/openapi.json', auth: 'none' },
  { method: 'GET', path: '/docs', auth: 'none' },
  { method: 'GET', path: '/docs/init.js', auth: 'none' },
  { method: 'GET', path: '/docs/docs.css', auth: 'none' },
  { method: 'GET', path: '/docs/cli', auth: 'none' },
  { method: 'GET', path: '/metrics', auth: 'none' },
  // accounts
  { method: 'POST', path: '/v1/register', auth: 'none' },
  { method: 'POST', path: '/v1/email/verify', auth: 'none' },
  { method: 'POST', path: '/v1/email/verify/resend', auth: 'session' },
  { method: 'POST', path: '/v1/login', auth: 'none' },
  { method: 'POST', path: '/v1/2fa/login', auth: 'none' },
  { method: 'POST', path: '/v1/logout', auth: 'session', consumes: true },
  { method: 'GET', path: '/v1/2fa/status', auth: 'session' },
  { method: 'POST', path: '/v1/2fa/setup', auth: 'session' },
  { method: 'POST', path: '/v1/2fa/enable', auth: 'session' },
  { method: 'POST', path: '/v1/2fa/disable', auth: 'session' },
  { method: 'POST', path: '/v1/password/reset/request', auth: 'none' },
  { method: 'POST', path: '/v1/password/reset/confirm', auth: 'none' },
  // Hostile bodies never carry the password, so the account survives them.
  { method: 'POST', path: '/v1/account/delete', auth: 'session' },
  // clients and members
  { method: 'GET', path: '/v1/clients', auth: 'session' },
  { method: 'POST', path: '/v1/clients', auth: 'session' },
  { method: 'DELETE', path: '/v1/clients/:client_id', auth: 'session', writes: true },
  { method: 'GET', path: '/v1/clients/:client_id/members', auth: 'session' },
  { method: 'POST', path: '/v1/clients/:client_id/members', auth: 'session' },
  { method: 'DELETE', path: '/v1/clients/:client_id/members/:user_id', auth: 'session', writes: true },
  { method: 'PATCH', path: '/v1/clients/:client_id', auth: 'session' },
  { method: 'PATCH', path: '/v1/clients/:client_id/members/:user_id', auth: 'session', writes: true },
  { method: 'POST', path: '/v1/clients/:client_id/leave', auth: 'session' },
  { method: 'GET', path: '/v1/clients/:client_id/invitations', auth: 'session' },
  { method: 'POST', path: '/v1/clients/:client_id/invitations', auth: 'session' },
  {
    method: 'DELETE',
    path: '/v1/clients/:client_id/invitations/:invitation_id',
    auth: 'session',
    writes: true,
  },
  {
    method: 'POST',
    path: '/v1/clients/:client_id/invitations/:invitation_id/resend',
    auth: 'session',
    writes: true,
  },
  { method: 'POST', path: '/v1/invitations/accept', auth: 'session' },
  // tokens and the device flow
  { method: 'POST', path: '/v1/tokens', auth: 'session' },
  { method: 'GET', path: '/v1/tokens', auth: 'session' },
  { method: 'POST', path: '/v1/tokens/revoke', auth: 'session', writes: true },
  { method: 'GET', path: '/v1/auth/verify', auth: 'token' },
  { method: 'POST', path: '/v1/auth/device/code', auth: 'none' },
  { method: 'POST', path: '/v1/auth/device/authorize', auth: 'session' },
  { method: 'POST', path: '/v1/auth/device/deny', auth: 'session' },
  { method: 'POST', path: '/v1/auth/device/poll', auth: 'none' },
  // billing
  { method: 'GET', path: '/v1/owner/balance', auth: 'session' },
  { method: 'PUT', path: '/v1/owner/orgs/:org_id/allocation', auth: 'session', writes: true },
  { method: 'GET', path: '/v1/clients/:client_id/credits/balance', auth: 'session' },
  { method: 'GET', path: '/v1/clients/:client_id/credits/transactions', auth: 'session' },
  { method: 'GET', path: '/v1/clients/:client_id/subscription', auth: 'session' },
  { method: 'GET', path: '/v1/clients/:client_id/invoices', auth: 'session' },
  { method: 'GET', path: '/v1/clients/:client_id/payment-methods', auth: 'session' },
  { method: 'POST', path: '/v1/clients/:client_id/subscription/checkout', auth: 'session' },
  { method: 'POST', path: '/v1/clients/:client_id/credits/topup', auth: 'session' },
  { method: 'POST', path: '/v1/clients/:client_id/billing/portal', auth: 'session' },
  { method: 'GET', path: '/v1/clients/:client_id/usage', auth: 'session' },
  { method: 'GET', path: '/v1/clients/:client_id/usage/calls', auth: 'session' },
  // the owner's alerts, auto top-up and member budgets
  { method: 'GET', path: '/v1/clients/:client_id/balance-alert', auth: 'session' },
  { method: 'PUT', path: '/v1/clients/:client_id/balance-alert', auth: 'session', writes: true },
  { method: 'GET', path: '/v1/clients/:client_id/auto-topup', auth: 'session' },
  { method: 'PUT', path: '/v1/clients/:client_id/auto-topup', auth: 'session', writes: true },
  { method: 'DELETE', path: '/v1/clients/:client_id/auto-topup', auth: 'session', writes: true },
  { method: 'GET', path: '/v1/clients/:client_id/budget', auth: 'session' },
  { method: 'GET', path: '/v1/clients/:client_id/budgets', auth: 'session' },
  { method: 'PUT', path: '/v1/clients/:client_id/members/:user_id/budget', auth: 'session', writes: true },
  { method: 'DELETE', path: '/v1/clients/:client_id/members/:user_id/budget', auth: 'session', writes: true },
  { method: 'PUT', path: '/v1/clients/:client_id/tokens/:token_id/budget', auth: 'session', writes: true },
  { method: 'DELETE', path: '/v1/clients/:client_id/tokens/:token_id/budget', auth: 'session', writes: true },
  { method: 'GET', path: '/v1/clients/:client_id/webhook-endpoints', auth: 'session' },
  { method: 'GET', path: '/v1/clients/:client_id/audit-events', auth: 'session' },
  { method: 'GET', path: '/v1/clients/:client_id/audit-events/verify', auth: 'session' },
  { method: 'GET', path: '/v1/account/audit-events', auth: 'session' },
  { method: 'GET', path: '/v1/account/audit-events/verify', auth: 'session' },
  { method: 'POST', path: '/v1/clients/:client_id/webhook-endpoints', auth: 'session', writes: true },
  {
    method: 'DELETE',
    path: '/v1/clients/:client_id/webhook-endpoints/:endpoint_id',
    auth: 'session',
    writes: true,
  },
  {
    method: 'GET',
    path: '/v1/clients/:client_id/webhook-endpoints/:endpoint_id/deliveries',
    auth: 'session',
  },
  { method: 'POST', path: '/v1/webhooks/stripe', auth: 'none' },
  { method: 'GET', path: '/dev/checkout/:session_id', auth: 'none' },
  { method: 'POST', path: '/dev/checkout/:session_id', auth: 'none', writes: true },
  { method: 'GET', path: '/dev/portal/:customer_id', auth: 'none' },
  { method: 'POST', path: '/dev/portal/:customer_id', auth: 'none', writes: true },
  { method: 'GET', path: '/dev/invoices/:invoice_id', auth: 'none' },
  { method: 'POST', path: '/dev/invoices/:invoice_id/refund', auth: 'none', writes: true },
  { method: 'POST', path: '/dev/invoices/:invoice_id/dispute', auth: 'none', writes: true },
  // projects
  { method: 'GET', path: '/v1/projects', auth: 'session' },
  { method: 'POST', path: '/v1/projects', auth: 'session' },
  { method: 'GET', path: '/v1/projects/:project_id', auth: 'session' },
  { method: 'PATCH', path: '/v1/projects/:project_id', auth: 'session' },
  { method: 'DELETE', path: '/v1/projects/:project_id', auth: 'session', writes: true },
  { method: 'POST', path: '/v1/projects/:project_id/fork', auth: 'session' },
  { method: 'POST', path: '/v1/projects/:project_id/transfer', auth: 'session' },
  { method: 'GET', path: '/s/:token', auth: 'none' },
  // model routes
  { method: 'GET', path: '/v1/models', auth: 'model' },
  { method: 'GET', path: '/v1/models/:id', auth: 'model' },
  { method: 'GET', path: '/v1/agents', auth: 'model' },
  { method: 'POST', path: '/v1/chat/completions', auth: 'model' },
  { method: 'POST', path: '/v1/responses', auth: 'model' },
  { method: 'GET', path: '/v1/responses/:response_id', auth: 'model' },
  { method: 'DELETE', path: '/v1/responses/:response_id', auth: 'model', writes: true },
  { method: 'GET', path: '/v1/runs/ws', auth: 'model' },
  // OAuth
  { method: 'GET', path: '/oauth/authorize', auth: 'page' },
  { method: 'POST', path: '/oauth/authorize', auth: 'page' },
  { method: 'POST', path: '/oauth/token', auth: 'none' },
  { method: 'POST', path: '/oauth/register', auth: 'none' },
  { method: 'POST', path: '/oauth/revoke', auth: 'none' },
  { method: 'POST', path: '/oauth/introspect', auth: 'none' },
  { method: 'POST', path: '/oauth/device_authorization', auth: 'none' },
  // MCP
  { method: 'POST', path: '/mcp/platform', auth: 'platform' },
  { method: 'GET', path: '/mcp/platform', auth: 'platform' },
  // pages
  { method: 'GET', path: '/account', auth: 'page' },
  { method: 'GET', path: '/account/login', auth: 'page' },
  { method: 'POST', path: '/account/login', auth: 'page' },
  { method: 'POST', path: '/account/login/2fa', auth: 'page' },
  { method: 'POST', path: '/account/logout', auth: 'page', consumes: true },
  { method: 'GET', path: '/account/register', auth: 'page' },
  { method: 'POST', path: '/account/register', auth: 'page' },
  { method: 'GET', path: '/account/verify', auth: 'page' },
  { method: 'POST', path: '/account/verify/resend', auth: 'page' },
  { method: 'GET', path: '/account/reset', auth: 'page' },
  { method: 'POST', path: '/account/reset', auth: 'page' },
  { method: 'POST', path: '/account/reset/confirm', auth: 'page' },
  { method: 'GET', path: '/account/device', auth: 'page' },
  { method: 'POST', path: '/account/device', auth: 'page' },
  { method: 'POST', path: '/account/2fa/setup', auth: 'page' },
  { method: 'POST', path: '/account/2fa/enable', auth: 'page' },
  { method: 'POST', path: '/account/2fa/disable', auth: 'page' },
  { method: 'POST', path: '/account/clients', auth: 'page' },
  { method: 'GET', path: '/account/clients/:clientId', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/members', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/members/:userId/remove', auth: 'page', writes: true },
  { method: 'GET', path: '/account/clients/:clientId/settings', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/settings/name', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/settings/limits', auth: 'page' },
  { method: 'GET', path: '/account/clients/:clientId/delete', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/delete', auth: 'page', writes: true },
  { method: 'GET', path: '/account/clients/:clientId/leave', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/leave', auth: 'page', writes: true },
  { method: 'POST', path: '/account/clients/:clientId/members/:userId/role', auth: 'page', writes: true },
  { method: 'GET', path: '/account/clients/:clientId/members/:userId/remove', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/invitations', auth: 'page' },
  {
    method: 'POST',
    path: '/account/clients/:clientId/invitations/:invitationId/revoke',
    auth: 'page',
    writes: true,
  },
  {
    method: 'POST',
    path: '/account/clients/:clientId/invitations/:invitationId/resend',
    auth: 'page',
    writes: true,
  },
  { method: 'GET', path: '/account/invitations/accept', auth: 'page' },
  { method: 'POST', path: '/account/invitations/accept', auth: 'page' },
  { method: 'GET', path: '/', auth: 'page' },
  { method: 'GET', path: '/account/switch', auth: 'page' },
  { method: 'GET', path: '/account/clients/:clientId/usage', auth: 'page' },
  { method: 'GET', path: '/account/clients/:clientId/billing', auth: 'page' },
  { method: 'GET', path: '/account/clients/:clientId/audit-log', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/billing/topup', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/billing/topup/pay', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/billing/subscribe', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/billing/portal', auth: 'page' },
  // The billing page's owner cards (registered through the billing page's owner-action wrapper, so the census
  // above cannot name them): every body hostile, never 5xx.
  { method: 'POST', path: '/account/clients/:clientId/billing/alert', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/billing/webhook-endpoints', auth: 'page' },
  {
    method: 'POST',
    path: '/account/clients/:clientId/billing/webhook-endpoints/:endpointId/delete',
    auth: 'page',
    writes: true,
  },
  { method: 'POST', path: '/account/clients/:clientId/billing/auto-topup', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/billing/auto-topup/off', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/billing/budgets', auth: 'page' },
  { method: 'POST', path: '/account/clients/:clientId/billing/budgets/remove', auth: 'page' },
  { method: 'POST', path: '/account/allocations', auth: 'page' },
  { method: 'GET', path: '/account/settings', auth: 'page' },
  { method: 'GET', path: '/account/audit-log', auth: 'page' },
  { method: 'POST', path: '/account/settings/name', auth: 'page' },
  { method: 'POST', path: '/account/settings/password', auth: 'page' },
  // Not driven: POST /account/settings/sessions/revoke-others would sign out this table's own session
  // (test/portal/portal-settings-browser.test.ts covers it).
  { method: 'POST', path: '/account/settings/sessions/:sessionId/revoke', auth: 'page', writes: true },
  { method: 'POST', path: '/account/settings/apps/:grantId/revoke', auth: 'page', writes: true },
  // Hostile bodies never carry the password, so the account survives them.
  { method: 'POST', path: '/account/settings/delete', auth: 'page' },
  { method: 'GET', path: '/account/no-such-page', auth: 'page' },
  { method: 'GET', path: '/v1/no-such-route', auth: 'session' },
];

const LONG = 'x'.repeat(100_000);
/** Malformed path parameters: wrong prefixes, empty ids, traversal, NUL, bad escapes, unicode, length. */
const BAD_IDS = [
  'client_x',
  'prj_',
  'org_',
  'usr_',
  '..',
  '..%2F..%2Fetc',
  '%00',
  '%ZZ',
  '%E0%A4%A',
  'ünïcødé✓',
  '%F0%9F%92%A9',
  'a'.repeat(4000),
  "1'or'1",
  '-1',
  '1e309',
];

/** Every field name the API reads anywhere: a body with all of them reaches whichever the route parses. */
const FIELDS = [
  'email',
  'password',
  'name',
  'code',
  'token',
  'token_id',
  'token_name',
  'challenge_token',
  'user_code',
  'device_code',
  'client_id',
  'user_id',
  'role',
  'target_credits',
  'amount_usd',
  'price_id',
  'customer_email',
  'return_url',
  'success_url',
  'cancel_url',
  'title',
  'description',
  'target_client_id',
  'visibility',
  'model',
  'messages',
  'stream',
  'max_tokens',
  'temperature',
  'tools',
  'grant_type',
  'redirect_uri',
  'redirect_uris',
  'code_verifier',
  'refresh_token',
  'resource',
  'scope',
  'client_secret',
  'client_name',
  'token_endpoint_auth_method',
  'grant_types',
  'decision',
  'return_to',
  'limit',
  'offset',
  'jsonrpc',
  'method',
  'params',
  'id',
  'state',
  'response_type',
  'code_challenge',
  'code_challenge_method',
  'token_type_hint',
  'recovery_code',
  'current_password',
  'new_password',
  'org_id',
  'target_org_id',
  'brief',
  'n',
  'top_p',
  'stop',
  'user',
  'amount_credits',
];

const HOSTILE_VALUES: [string, string][] = [
  ['1e309', '1e309'],
  ['-1', '-1'],
  ['2**63', '9223372036854775808'],
  ['-0', '-0'],
  ['true', 'true'],
  ['null', 'null'],
  ['{}', '{}'],
  ['[]', '[]'],
  ['[1,"a"]', '[1,"a"]'],
  // Every field 100k long is a 6.5 MB body: over the 1 MB JSON limit (a 413 before any route), parsed
  // only where a route reads more (MCP, the model routes). 10k in every field fits under the limit, so
  // long strings reach every route's own validation.
  ['100k string', JSON.stringify(LONG)],
  ['10k string', JSON.stringify(LONG.slice(0, 10_000))],
  ['NUL string', JSON.stringify('a\u0000b')],
  ['unicode', JSON.stringify('ünïcødé ✓ 💩 \u202e')],
  ['lone surrogate', '"\\ud800"'],
  ['empty string', '""'],
];
const allFields = (raw: string) => `{${FIELDS.map((f) => `${JSON.stringify(f)}:${raw}`).join(',')}}`;

interface BodyCase {
  label: string;
  body?: string;
  type?: string;
}
const JSON_T = 'application/json';
const FORM_T = 'application/x-www-form-urlencoded';
const BODIES: BodyCase[] = [
  { label: 'no body' },
  { label: 'empty JSON body', body: '', type: JSON_T },
  { label: 'null', body: 'null', type: JSON_T },
  { label: 'array', body: '[]', type: JSON_T },
  { label: 'array of objects', body: '[{"email":"a@b.c"}]', type: JSON_T },
  { label: 'string', body: '"hello"', type: JSON_T },
  { label: 'number', body: '1e309', type: JSON_T },
  { label: 'invalid JSON', body: '{"a":', type: JSON_T },
  {
    label: 'extra fields',
    body: '{"unexpected":1,"__proto__":{"polluted":1},"constructor":{"prototype":{"x":1}}}',
    type: JSON_T,
  },
  { label: 'deep nesting', body: '['.repeat(5000) + ']'.repeat(5000), type: JSON_T },
  { label: 'JSON as text/plain', body: '{"email":"a@b.c","password":"x"}', type: 'text/plain' },
  {
    label: 'form on JSON route',
    body: 'email=a%40b.c&limit=1&limit=2&client_id=client_x&client_id=y',
    type: FORM_T,
  },
  { label: 'bad charset', body: '{}', type: 'application/json; charset=utf-7' },
  { label: 'bad form escapes', body: 'grant_type=%ZZ&a=%00&%E0=1', type: FORM_T },
  {
    label: 'form 100k',
    body: `grant_type=authorization_code&code=${LONG}&client_id=${LONG.slice(0, 5000)}`,
    type: FORM_T,
  },
  {
    label: 'multipart',
    body: '--b\r\ncontent-disposition: form-data; name="a"\r\n\r\n1\r\n--b--',
    type: 'multipart/form-data; boundary=b',
  },
  ...HOSTILE_VALUES.map(([label, raw]) => ({
    label: `every field ${label}`,
    body: allFields(raw),
    type: JSON_T,
  })),
  ...HOSTILE_VALUES.slice(0, 4).map(([label, raw]) => ({
    label: `every field ${label} (form)`,
    body: FIELDS.map((f) => `${f}=${encodeURIComponent(raw)}`).join('&'),
    type: FORM_T,
  })),
];
const QUERIES = [
  '',
  '?limit=1&limit=2',
  '?limit=-1&offset=-1',
  '?limit=1e309&offset=9223372036854775808',
  '?limit=abc&offset=%00',
  '?limit=0.5&offset=1.5',
  '?x[y]=1&user_code[]=a&return_to=javascript:alert(1)',
  '?%ZZ=1&user_code=%ZZ',
  `?user_code=${'A'.repeat(5000)}&client_id=client_x&response_type=code&redirect_uri=%00`,
  '?user_code=%F0%9F%92%A9&client_id=%E2%80%AE&resource=..%2F',
];

// ---------------------------------------------------------------------------------------------------

let server: TestServer;
let user: TestUser;
let apiToken: string;
let platformToken: string;
let modelToken: string;
const csrf = randomBytes(32).toString('base64url');
let balanceBefore: unknown;
let projectId: string;

beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
  apiToken = (await createApiToken(server, user, user.orgKey)).secret;
  const grants = await issueTestGrants(server, user, {
    orgKey: user.orgKey,
    resources: ['platform', 'model'],
    origin: server.url,
  });
  platformToken = grants.platform!;
  modelToken = grants.model!;
  const project = await rawRequest(server.url, 'POST', '/v1/projects', {
    headers: { authorization: `Bearer ${user.session}`, 'content-type': JSON_T },
    body: JSON.stringify({ org_id: user.orgId, name: 'robustness' }),
  });
  expect(project.status).toBe(200);
  projectId = readJson(z.object({ id: z.string() }), project.json).id;
  balanceBefore = (
    await rawRequest(server.url, 'GET', `/v1/clients/${user.clientId}/credits/balance`, {
      headers: { authorization: `Bearer ${user.session}` },
    })
  ).json;
});
afterAll(async () => {
  await server?.close();
});

function surfaceOf(path: string): 'detail' | 'openai' | 'oauth' | 'authorize' | 'mcp' | 'html' | 'any' {
  const p = path.split('?')[0]!;
  if (p.startsWith('/oauth/authorize')) return 'authorize';
  if (p.startsWith('/oauth/')) return 'oauth';
  if (/^\/v1\/(chat\/|responses(\/|$)|models(\/|$)|agents(\/|$)|runs(\/|$))/.test(p)) return 'openai';
  if (p.startsWith('/mcp/')) return 'mcp';
  if (p.startsWith('/account') || p.startsWith('/s/')) return 'html';
  if (p.startsWith('/dev/') || p.startsWith('/.well-known') || p === '/healthz' || p === '/readyz')
    return 'any';
  return 'detail';
}

/** Why this answer breaks the rule, or null when it keeps it. */
export function violation(path: string, res: RawResult): string | null {
  if (res.status >= 500) return `5xx`;
  if (res.status < 400) return null;
  const b = res.json;
  // CONTRACT §6: a terminal poll's refusals are 400 {status: access_denied | expired_token}.
  const status = at(b, 'status');
  if (path.startsWith('/v1/auth/device/poll') && (status === 'access_denied' || status === 'expired_token'))
    return null;
  switch (surfaceOf(path)) {
    case 'detail':
      return typeof at(b, 'detail', 'code') === 'string' && typeof at(b, 'detail', 'message') === 'string'
        ? null
        : 'not {detail:{code,message}}';
    case 'openai': {
      const error = at(b, 'error');
      return error &&
        typeof at(error, 'message') === 'string' &&
        typeof at(error, 'type') === 'string' &&
        has(error, 'code') &&
        has(error, 'param')
        ? null
        : 'not OpenAI {error:{message,type,code,param}}';
    }
    case 'oauth': {
      const description = at(b, 'error_description');
      return typeof at(b, 'error') === 'string' &&
        (description === undefined || typeof description === 'string')
        ? null
        : 'not RFC 6749 {error, error_description}';
    }
    case 'authorize':
      return res.contentType.includes('text/html') || typeof at(b, 'error') === 'string'
        ? null
        : 'neither a page nor an OAuth error';
    case 'mcp':
      return at(b, 'jsonrpc') === '2.0' && typeof at(b, 'error', 'code') === 'number'
        ? null
        : 'not a JSON-RPC error';
    case 'html':
      return res.contentType.includes('text/html') ? null : 'not an HTML page';
    default:
      return null;
  }
}

async function headersFor(route: Route, signedIn: boolean): Promise<Record<string, string>> {
  const h: Record<string, string> = { 'accept-encoding': 'identity' };
  if (route.path.startsWith('/mcp/')) h.accept = 'application/json, text/event-stream';
  if (!signedIn) return h;
  const session = route.consumes
    ? (await issueSession(server.deps.db, server.deps.keys.session, user.userId)).token
    : user.session;
  switch (route.auth) {
    case 'session':
      h.authorization = `Bearer ${session}`;
      break;
    case 'token':
      h.authorization = `Bearer ${apiToken}`;
      break;
    case 'model':
      h.authorization = `Bearer ${modelToken}`;
      break;
    case 'platform':
      h.authorization = `Bearer ${platformToken}`;
      break;
    case 'page':
      // A signed-in browser with a CSRF pair, saying same-origin, so a form reaches its validation.
      h.cookie = `__Host-svc_session=${session}; __Host-svc_csrf=${csrf}`;
      h['sec-fetch-site'] = 'same-origin';
      break;
  }
  return h;
}

/** Puts the CSRF field into a page form's body, so validation (not the CSRF check) is what answers. */
function withCsrf(route: Route, c: BodyCase): BodyCase {
  if (route.auth !== 'page' || c.body === undefined) return c;
  if (c.type === FORM_T) return { ...c, body: `csrf_token=${csrf}&${c.body}` };
  if (c.type === JSON_T && c.body.startsWith('{"'))
    return { ...c, body: `{"csrf_token":"${csrf}",${c.body.slice(1)}` };
  return c;
}

/** The real id for a path parameter (so a hostile body meets the real row's validation). */
function realId(param: string): string {
  if (/client/i.test(param)) return user.clientId;
  if (param === ':org_id') return user.orgId;
  if (param === ':project_id') return projectId;
  if (/user/i.test(param)) return user.userId;
  return user.clientId;
}

function pathsFor(route: Route): string[] {
  if (!route.path.includes(':')) return [route.path];
  const fill = (id: string) => route.path.replace(/:[a-zA-Z_]+/g, id);
  const real = route.writes ? [] : [route.path.replace(/:[a-zA-Z_]+/g, realId)];
  return [...real, ...BAD_IDS.map(fill)];
}

interface Finding {
  what: string;
  status: number;
  why: string;
  body: string;
}

async function drive(route: Route, signedIn: boolean): Promise<Finding[]> {
  const findings: Finding[] = [];
  const cases: { path: string; c: BodyCase }[] = [];
  const paths = pathsFor(route);
  const hasBody = route.method !== 'GET';
  // The canonical path gets every body and every query; the malformed paths a representative few.
  const base = paths[0]!;
  const scoped = [
    `?org_id=${user.orgId}&limit=1e309&offset=-1`,
    `?org_id=${user.orgId}&limit=1&limit=2`,
    `?org_id=${user.orgId}&org_id=${user.orgId}&limit=101`,
  ];
  for (const q of [...QUERIES, ...scoped])
    cases.push({ path: base + q, c: hasBody ? BODIES[1]! : BODIES[0]! });
  if (hasBody) for (const c of BODIES) cases.push({ path: base, c });
  for (const p of paths.slice(1)) {
    cases.push({ path: p, c: BODIES[0]! });
    if (hasBody) cases.push({ path: p, c: BODIES.find((b) => b.label === 'every field 10k string')! });
  }
  await pool(
    cases.map(({ path, c }) => async () => {
      const body = withCsrf(route, c);
      const headers = await headersFor(route, signedIn);
      if (body.type) headers['content-type'] = body.type;
      const res = await rawRequest(server.url, route.method, path, { headers, body: body.body });
      const why = violation(path, res);
      if (why)
        findings.push({
          what: `${route.method} ${path.slice(0, 120)} [${c.label}]`,
          status: res.status,
          why,
          body: res.text.slice(0, 160),
        });
    }),
  );
  return findings;
}

const report = (findings: Finding[]) =>
  findings.map((f) => `${f.status} ${f.why}: ${f.what} → ${f.body}`).join('\n');

/** The portal's self-service pages: a group of their own, so each group stays within its time. */
const selfService = (r: Route) =>
  r.path === '/' ||
  /^\/account\/(switch|allocations|settings|clients\/:clientId\/(usage|billing))/.test(r.path);

describe('hostile input on every route', () => {
  const groups = [
    [
      'accounts, clients, tokens, device',
      (r: Route) =>
        /^\/v1\/(register|email|login|2fa|logout|password|account\/|clients(\/[^/]+)?(\/members)?$|clients\/:client_id\/(members|leave|invitations|audit-events)|invitations|tokens|auth)/.test(
          r.path,
        ),
    ],
    [
      'billing and dev processor',
      (r: Route) =>
        /^\/v1\/(owner|clients\/:client_id\/(credits|subscription|invoices|payment|billing|usage|balance-alert|auto-topup|budget|tokens\/:token_id\/budget|webhook-endpoints)|webhooks)|^\/dev\//.test(
          r.path,
        ),
    ],
    ['projects and share pages', (r: Route) => /^\/v1\/projects|^\/s\//.test(r.path)],
    ['model routes', (r: Route) => surfaceOf(r.path) === 'openai'],
    [
      'OAuth and metadata',
      (r: Route) =>
        /^\/oauth\/|^\/\.well-known|^\/healthz|^\/readyz|^\/openapi\.json|^\/docs|^\/metrics/.test(r.path),
    ],
    ['MCP', (r: Route) => r.path.startsWith('/mcp/')],
    ['pages', (r: Route) => r.path.startsWith('/account') && !r.path.includes('no-such') && !selfService(r)],
    ['self-service pages (usage, billing, settings)', selfService],
    ['unknown routes', (r: Route) => r.path.includes('no-such')],
  ] as const;

  it('covers every route the source declares (a new route must join the table)', () => {
    const files = ['src', 'oauth', 'mcp'].flatMap((dir) =>
      readdirSync(dir, { recursive: true, encoding: 'utf8' })
        .filter((f) => f.endsWith('.ts'))
        .map((f) => join(dir, f)),
    );
    const declared = new Set<string>();
    for (const file of files) {
      for (const m of readFileSync(file, 'utf8').matchAll(
        /router\.(get|post|put|patch|delete)\(\s*'([^']+)'/g,
      ))
        declared.add(`${m[1]!.toUpperCase()} ${m[2]}`);
    }
    expect(declared.size).toBeGreaterThan(80);
    const table = new Set(ROUTES.map((r) => `${r.method} ${r.path}`));
    expect([...declared].filter((r) => !table.has(r))).toEqual([]);
  });

  it('puts every route in exactly one group', () => {
    for (const r of ROUTES) {
      const n = groups.filter(([, pick]) => pick(r)).length;
      expect(n, `${r.method} ${r.path}`).toBe(1);
    }
  });

  for (const [name, pick] of groups) {
    for (const signedIn of [true, false]) {
      it(`${name}: never 5xx, always the surface's error shape (${signedIn ? 'signed in' : 'anonymous'})`, async () => {
        const findings: Finding[] = [];
        for (const route of ROUTES.filter(pick)) {
          if (!signedIn && route.auth === 'none') continue; // once is enough
          findings.push(...(await drive(route, signedIn)));
        }
        expect(findings, report(findings)).toEqual([]);
      });
    }
  }

  it('hostile credentials and headers on every route: never 5xx, always the shape of the surface', async () => {
    const b64 = (v: string) => Buffer.from(v).toString('base64');
    const variants: Record<string, string>[] = [
      { authorization: 'Bearer' },
      { authorization: `Bearer ${'x'.repeat(8000)}` },
      { authorization: 'Bearer a.b.c' },
      { authorization: 'Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.' },
      { authorization: `Bearer svc_${'ü'.repeat(10)}` },
      { authorization: `Basic ${b64('%ZZ:%E0%A4%A')}` },
      { authorization: 'Basic ###' },
      { authorization: `Basic ${b64('svc-cli')}` },
      { cookie: '__Host-svc_session=%ZZ; __Host-svc_csrf=%E0%A4%A' },
      { authorization: `Bearer ${platformToken}`, 'x-svc-organisation': 'client_x' },
      { authorization: `Bearer ${modelToken}`, 'x-svc-organisation': `${'a'.repeat(3000)}` },
      { 'content-encoding': 'gzip', 'content-type': JSON_T },
      { 'content-type': 'application/json; charset=latin1' },
      { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' },
    ];
    const findings: Finding[] = [];
    await pool(
      ROUTES.flatMap((route) =>
        variants.map((extra) => async () => {
          const path = pathsFor(route)[0]!;
          const headers = { ...(await headersFor(route, false)), ...extra };
          const hasBody = route.method !== 'GET';
          if (hasBody) headers['content-type'] ??= JSON_T;
          const res = await rawRequest(server.url, route.method, path, {
            headers,
            body: hasBody ? '{"a":1}' : undefined,
          });
          const why = violation(path, res);
          if (why)
            findings.push({
              what: `${route.method} ${path} ${JSON.stringify(extra).slice(0, 100)}`,
              status: res.status,
              why,
              body: res.text.slice(0, 160),
            });
        }),
      ),
    );
    expect(findings, report(findings)).toEqual([]);
  });

  it('random JSON bodies on every body route (fast-check)', async () => {
    const bodyRoutes = ROUTES.filter((r) => r.method !== 'GET');
    const key = fc.constantFrom(...FIELDS, 'csrf_token', '__proto__', '');
    const value = fc.oneof(
      fc.jsonValue({ maxDepth: 3 }),
      fc.constantFrom(1e308, -1, 2 ** 63, Number.MAX_SAFE_INTEGER + 2, 0, -0, 0.5),
      fc.string({ maxLength: 40 }),
      fc.string({ unit: 'grapheme', maxLength: 20 }),
    );
    const findings: Finding[] = [];
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...bodyRoutes),
        fc.dictionary(key, value, { maxKeys: 8 }),
        fc.boolean(),
        async (route, obj, signedIn) => {
          const headers = await headersFor(route, signedIn);
          headers['content-type'] = JSON_T;
          const path = pathsFor(route)[0]!;
          const payload = route.auth === 'page' ? { ...obj, csrf_token: csrf } : obj;
          const res = await rawRequest(server.url, route.method, path, {
            headers,
            body: JSON.stringify(payload),
          });
          const why = violation(path, res);
          if (why)
            findings.push({
              what: `${route.method} ${path} ${JSON.stringify(obj).slice(0, 200)}`,
              status: res.status,
              why,
              body: res.text.slice(0, 160),
            });
          return why === null;
        },
      ),
      { numRuns: 300, seed: 20261121, endOnFailure: true },
    );
    expect(findings, report(findings)).toEqual([]);
  });

  it('loses nothing: after all of it the signed-in user, organization and balance are intact', async () => {
    const h = { authorization: `Bearer ${user.session}` };
    const clients = await rawRequest(server.url, 'GET', '/v1/clients', { headers: h });
    expect(clients.status).toBe(200);
    expect(JSON.stringify(clients.json)).toContain(user.clientId);
    const balance = await rawRequest(server.url, 'GET', `/v1/clients/${user.clientId}/credits/balance`, {
      headers: h,
    });
    expect(balance.status).toBe(200);
    expect(balance.json).toEqual(balanceBefore);
    const members = await rawRequest(server.url, 'GET', `/v1/clients/${user.clientId}/members`, {
      headers: h,
    });
    expect(members.status).toBe(200);
    expect(JSON.stringify(members.json)).toContain(user.email);
    expect(
      (
        await rawRequest(server.url, 'GET', '/v1/models', {
          headers: { authorization: `Bearer ${modelToken}` },
        })
      ).status,
    ).toBe(200);
    const twoFactor = await rawRequest(server.url, 'GET', '/v1/2fa/status', { headers: h });
    expect(twoFactor.json).toMatchObject({ enabled: false });
  });
});

describe('regressions found by the table', () => {
  const jsonHeaders = { 'content-type': JSON_T, 'accept-encoding': 'identity' };

  it('a NUL character anywhere is 400 VALIDATION_ERROR, not a database error (500 / 503)', async () => {
    const h = { ...jsonHeaders, authorization: `Bearer ${user.session}` };
    const login = await rawRequest(server.url, 'POST', '/v1/login', {
      headers: jsonHeaders,
      body: '{"email":"a\\u0000@b.c","password":"x\\u0000"}',
    });
    expect(login.status).toBe(400);
    expect(readJson(detailError, login.json).detail).toMatchObject({
      code: 'VALIDATION_ERROR',
      errors: [{ path: 'body' }],
    });
    const created = await rawRequest(server.url, 'POST', '/v1/clients', {
      headers: h,
      body: '{"name":"a\\u0000b"}',
    });
    expect(created.status).toBe(400);
    const dev = await rawRequest(server.url, 'GET', '/dev/portal/%00', {});
    expect(dev.status).toBe(400);
    const revoke = await rawRequest(server.url, 'POST', '/oauth/revoke', {
      headers: { 'content-type': FORM_T },
      body: 'token=x&client_id=a%00b',
    });
    expect(revoke.status).toBe(400);
    expect(revoke.json).toMatchObject({ error: 'invalid_request' });
  });

  it('hostile amounts leave an allocation and the top-up ledger exactly as they were', async () => {
    const h = { ...jsonHeaders, authorization: `Bearer ${user.session}` };
    const before = await rawRequest(server.url, 'GET', `/v1/clients/${user.clientId}/credits/balance`, {
      headers: h,
    });
    const ledgerBefore = await rawRequest(
      server.url,
      'GET',
      `/v1/clients/${user.clientId}/credits/transactions`,
      { headers: h },
    );
    const ownerBefore = await rawRequest(server.url, 'GET', '/v1/owner/balance', { headers: h });
    for (const raw of ['1e309', '-1', '9223372036854775808', '0.5', '"100"', 'null', '[]', '{}', '1e16']) {
      const put = await rawRequest(server.url, 'PUT', `/v1/owner/orgs/${user.orgId}/allocation`, {
        headers: h,
        body: `{"target_credits":${raw}}`,
      });
      expect(put.status, raw).toBe(400);
      expect(readJson(detailError, put.json).detail.code, raw).toBe('VALIDATION_ERROR');
      const topup = await rawRequest(server.url, 'POST', `/v1/clients/${user.clientId}/credits/topup`, {
        headers: h,
        body: `{"amount_usd":${raw}}`,
      });
      expect(topup.status, raw).toBe(400);
    }
    const after = await rawRequest(server.url, 'GET', `/v1/clients/${user.clientId}/credits/balance`, {
      headers: h,
    });
    expect(after.json).toEqual(before.json);
    expect(
      (
        await rawRequest(server.url, 'GET', `/v1/clients/${user.clientId}/credits/transactions`, {
          headers: h,
        })
      ).json,
    ).toEqual(ledgerBefore.json);
    expect((await rawRequest(server.url, 'GET', '/v1/owner/balance', { headers: h })).json).toEqual(
      ownerBefore.json,
    );
  });

  it('an unreadable body is answered in the surface: JSON-RPC parse error on MCP, a page under /account, invalid_request on OAuth', async () => {
    const mcp = await rawRequest(server.url, 'POST', '/mcp/platform', {
      headers: {
        ...jsonHeaders,
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${platformToken}`,
      },
      body: '{"jsonrpc":',
    });
    expect(mcp.status).toBe(400);
    expect(mcp.json).toMatchObject({ jsonrpc: '2.0', error: { code: -32700 }, id: null });
    const page = await rawRequest(server.url, 'POST', '/account/login', {
      headers: jsonHeaders,
      body: '{"email":',
    });
    expect(page.status).toBe(400);
    expect(page.contentType).toContain('text/html');
    const share = await rawRequest(server.url, 'GET', '/s/%E0%A4%A', {});
    expect(share.status).toBe(400);
    expect(share.contentType).toContain('text/html');
    const register = await rawRequest(server.url, 'POST', '/oauth/register', {
      headers: jsonHeaders,
      body: '{"redirect_uris":',
    });
    expect(register.status).toBe(400);
    expect(register.json).toMatchObject({ error: 'invalid_request' });
  });
});
