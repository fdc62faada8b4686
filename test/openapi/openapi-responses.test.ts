import { beforeAll, describe, expect, it } from 'vitest';
import { openApiDocument } from '../../src/openapi/document.js';
import { openApiPath } from '../../src/openapi/describe.js';
import { modelSuite } from '../helpers/model-suite.js';
import { createUser, STRONG_PASSWORD } from '../helpers/fixtures.js';
import { call, type CallOptions } from '../helpers/http.js';
import { documentValidator } from '../helpers/openapi.js';
import type { CreatedClient, DeviceCode, MintedToken, Page, SignedIn } from '../helpers/answers.js';
import type { ProjectOut } from '../../src/projects/schema.js';
import type { Model } from 'openai/resources/models';

// Real answers of the main flows validate against the document's response schemas (the schema of that
// route, that status and that content type), with @hyperjump/json-schema's OpenAPI 3.1 dialect. Output
// objects are closed, so a field a route sends without describing it fails here.

const suite = modelSuite();
let validator: Awaited<ReturnType<typeof documentValidator>>;
const seen: string[] = [];

beforeAll(async () => {
  validator = await documentValidator(openApiDocument());
});

/** Calls `method path` (the route's Express path in `route`, filled in `path`) and checks the answer. */
async function checked<T = unknown>(
  method: string,
  route: string,
  expected: number,
  opts: CallOptions & { path?: string; base?: string } = {},
) {
  const res = await call<T>(opts.base ?? suite.server.url, method.toUpperCase(), opts.path ?? route, opts);
  expect(res.status, `${method} ${route}: ${JSON.stringify(res.body)}`).toBe(expected);
  const type = (res.headers.get('content-type') ?? '').split(';')[0]!;
  if (type === 'application/json') {
    const output = await validator.validateResponse(method, openApiPath(route), res.status, res.body);
    expect(
      output.valid,
      `${method} ${route} ${res.status} does not match the document: ${JSON.stringify(output)} ${JSON.stringify(res.body)}`,
    ).toBe(true);
    seen.push(`${method} ${route} ${res.status}`);
  }
  return res;
}

describe('real answers match the OpenAPI document', () => {
  it('accounts, sessions, 2FA status, e-mail verification errors', async () => {
    const email = `openapi-${Date.now()}@example.test`;
    await checked('post', '/v1/register', 200, {
      body: { email, name: 'Doc Reader', password: STRONG_PASSWORD },
    });
    const login = await checked<SignedIn>('post', '/v1/login', 200, {
      body: { email, password: STRONG_PASSWORD },
    });
    const session = login.body.session_token;
    await checked('get', '/v1/2fa/status', 200, { token: session });
    await checked('post', '/v1/2fa/setup', 403, { token: session }); // unverified e-mail
    await checked('post', '/v1/email/verify', 400, { body: { token: 'not-a-token' } });
    await checked('post', '/v1/register', 400, { body: { email: 'nope' } });
    await checked('post', '/v1/password/reset/request', 200, { body: { email } });
    await checked('post', '/v1/logout', 200, { token: session });
  });

  it('clients, members, tokens, verify', async () => {
    const { owner } = suite;
    const token = owner.session;
    await checked('get', '/v1/clients', 200, { token });
    const created = await checked<CreatedClient>('post', '/v1/clients', 200, {
      token,
      body: { name: 'Docs team' },
    });
    const id = created.body.id;
    const other = await createUser(suite.server);
    await checked('post', '/v1/clients/:client_id/members', 200, {
      token,
      path: `/v1/clients/${id}/members`,
      body: { email: other.email, role: 'viewer' },
    });
    await checked('get', '/v1/clients/:client_id/members', 200, { token, path: `/v1/clients/${id}/members` });
    await checked('delete', '/v1/clients/:client_id/members/:user_id', 200, {
      token,
      path: `/v1/clients/${id}/members/${other.userId}`,
    });
    const minted = await checked<MintedToken>('post', '/v1/tokens', 200, {
      token,
      body: { token_name: 'docs', client_id: id },
    });
    await checked('get', '/v1/tokens', 200, { token });
    await checked('get', '/v1/auth/verify', 200, { token: minted.body.token });
    await checked('post', '/v1/tokens/revoke', 200, { token, body: { id: minted.body.id } });
    await checked('get', '/v1/auth/verify', 401, { token: minted.body.token });
    await checked('delete', '/v1/clients/:client_id', 200, { token, path: `/v1/clients/${id}` });
    await checked('get', '/v1/clients/:client_id/members', 404, { token, path: `/v1/clients/nope/members` });
  });

  it('device flow', async () => {
    // Its own user: the credential handed out replaces the user's token in that organization.
    const person = await createUser(suite.server);
    const code = await checked<DeviceCode>('post', '/v1/auth/device/code', 200);
    await checked('post', '/v1/auth/device/poll', 200, { body: { device_code: code.body.device_code } });
    await checked('post', '/v1/auth/device/authorize', 200, {
      token: person.session,
      body: { user_code: code.body.user_code },
    });
    await checked('post', '/v1/auth/device/poll', 200, { body: { device_code: code.body.device_code } });
    await checked('post', '/v1/auth/device/poll', 400, { body: { device_code: code.body.device_code } });
  });

  it('billing and usage', async () => {
    const { owner } = suite;
    const token = owner.session;
    const c = owner.clientId;
    await checked('get', '/v1/owner/balance', 200, { token });
    await checked('put', '/v1/owner/orgs/:org_id/allocation', 200, {
      token,
      path: `/v1/owner/orgs/${c}/allocation`,
      body: { target_credits: 10_000 },
    });
    for (const sub of ['credits/balance', 'credits/transactions', 'invoices', 'payment-methods']) {
      await checked('get', `/v1/clients/:client_id/${sub}`, 200, { token, path: `/v1/clients/${c}/${sub}` });
    }
    await checked('get', '/v1/clients/:client_id/subscription', 404, {
      token,
      path: `/v1/clients/${c}/subscription`,
    });
    await checked('post', '/v1/clients/:client_id/credits/topup', 200, {
      token,
      path: `/v1/clients/${c}/credits/topup`,
      body: {
        amount_usd: 500,
        success_url: 'https://example.test/ok',
        cancel_url: 'https://example.test/no',
      },
    });
    await checked('get', '/v1/clients/:client_id/usage', 200, { token, path: `/v1/clients/${c}/usage` });
    await checked('get', '/v1/clients/:client_id/usage/calls', 200, {
      token,
      path: `/v1/clients/${c}/usage/calls`,
    });
    await checked('post', '/v1/webhooks/stripe', 400, { body: { id: 'evt_1', type: 'x' } });
  });

  it('projects', async () => {
    const token = suite.key;
    const p = await checked<ProjectOut>('post', '/v1/projects', 200, {
      token,
      body: { org_id: suite.owner.clientId, name: 'Docs' },
    });
    const path = `/v1/projects/${p.body.id}`;
    await checked('get', '/v1/projects', 200, { token, query: { org_id: suite.owner.clientId } });
    await checked('get', '/v1/projects/:project_id', 200, { token, path });
    await checked('patch', '/v1/projects/:project_id', 200, {
      token,
      path,
      body: { description: 'described' },
    });
    await checked('post', '/v1/projects/:project_id/fork', 200, { token, path: `${path}/fork`, body: {} });
    await checked('delete', '/v1/projects/:project_id', 200, { token, path });
    await checked('get', '/v1/projects/:project_id', 404, { token, path });
  });

  it('models: catalog, agents, a chat call, and OpenAI-shaped errors', async () => {
    const token = suite.key;
    const list = await checked<Page<Model>>('get', '/v1/models', 200, { token });
    await checked('get', '/v1/models/:id', 200, { token, path: `/v1/models/${list.body.data[0]!.id}` });
    await checked('get', '/v1/models/:id', 404, { token, path: '/v1/models/nope' });
    await checked('get', '/v1/agents', 200, { token });
    const body = { messages: [{ role: 'user', content: 'hello' }], max_tokens: 16 };
    await checked('post', '/v1/chat/completions', 200, { token, body });
    await checked('post', '/v1/chat/completions', 401, { token: 'svc_wrong', body });
    await checked('post', '/v1/chat/completions', 400, { token, body: { messages: [] } });
  });

  it('OAuth metadata, registration and protocol errors; health', async () => {
    await checked('get', '/.well-known/oauth-authorization-server', 200);
    await checked('get', '/.well-known/oauth-protected-resource/v1', 200);
    await checked('get', '/.well-known/oauth-protected-resource/mcp/platform', 200);
    await checked('get', '/.well-known/jwks.json', 200);
    await checked('post', '/oauth/register', 201, {
      body: {
        redirect_uris: ['http://127.0.0.1:9/cb'],
        client_name: 'docs',
        token_endpoint_auth_method: 'none',
      },
    });
    await checked('post', '/oauth/token', 401, {
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'grant_type=refresh_token&refresh_token=nope&client_id=nope',
    });
    await checked('get', '/healthz', 200);
    await checked('get', '/readyz', 200);
    expect(seen.length).toBeGreaterThan(50);
  });
});
