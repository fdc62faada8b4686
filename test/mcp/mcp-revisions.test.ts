import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  Client as ClientV2,
  ProtocolError,
  ResourceNotFoundError,
  StreamableHTTPClientTransport as TransportV2,
} from '@modelcontextprotocol/client';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { anyOf, jsonAs } from '../helpers/json.js';

// Both protocol revisions on one endpoint (CONTRACT §10 "Protocol revisions"): the MCP SDK clients v1
// (2025-11-25, initialize) and v2 (2025-11-25 by default, 2026-07-28 when pinned) against /mcp/platform,
// and the 2026-07-28 wire rules a client author relies on, checked on the raw JSON-RPC.

const MODERN = '2026-07-28';
const META = {
  'io.modelcontextprotocol/protocolVersion': MODERN,
  'io.modelcontextprotocol/clientInfo': { name: 'svc-revisions-test', version: '1.0.0' },
  'io.modelcontextprotocol/clientCapabilities': {},
};

let server: TestServer;
let user: TestUser;
let token: string;
let endpoint: URL;

beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
  token = (await issueTestGrants(server, user, { orgKey: user.orgKey, resources: ['platform'] })).platform!;
  endpoint = new URL('/mcp/platform', server.v2Url);
});
afterAll(async () => {
  await server?.close();
});

const auth = () => ({ authorization: `Bearer ${token}` });

/** A 2026-07-28 request as its wire shows it: `_meta` in the body, the routing headers beside it. */
function modern(method: string, params: Record<string, unknown> = {}, headers: Record<string, string> = {}) {
  const name = (params.name ?? params.uri) as string | undefined;
  return fetch(endpoint, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': MODERN,
      'mcp-method': method,
      ...(name ? { 'mcp-name': name } : {}),
      ...auth(),
      ...headers,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method, params: { ...params, _meta: META } }),
  });
}

type RpcAnswer = {
  id: unknown;
  result?: Record<string, unknown>;
  error?: { code: number; message: string; data?: unknown };
};

async function v2Client(pin: boolean): Promise<ClientV2> {
  const client = new ClientV2(
    { name: 'svc-v2-client', version: '1.0.0' },
    pin ? { versionNegotiation: { mode: { pin: MODERN } } } : {},
  );
  await client.connect(new TransportV2(endpoint, { requestInit: { headers: auth() } }));
  return client;
}

describe('SDK clients of both generations, in both revisions', () => {
  it('v1 client (2025-11-25 handshake) lists the tools and calls them', async () => {
    const client = new ClientV1({ name: 'svc-v1-client', version: '1.0.0' });
    await client.connect(new TransportV1(endpoint, { requestInit: { headers: auth() } }));
    expect(client.getServerVersion()?.name).toBe('svc-platform');
    expect((await client.listTools()).tools).toHaveLength(20);
    const created = await client.callTool({ name: 'create_project', arguments: { name: 'From v1' } });
    expect(created.structuredContent).toMatchObject({ name: 'From v1' });
    await client.close();
  });

  for (const pin of [false, true]) {
    const revision = pin ? MODERN : '2025-11-25';
    it(`v2 client in ${revision}: tools, a tool's own failure, an unknown tool, resources`, async () => {
      const client = await v2Client(pin);
      expect((await client.listTools()).tools).toHaveLength(20);
      const created = await client.callTool({
        name: 'create_project',
        arguments: { name: `From v2 ${revision}` },
      });
      expect(created.isError).toBeFalsy();
      const project = created.structuredContent as { id: string; name: string };
      expect(project.name).toBe(`From v2 ${revision}`);
      const report = await client.callTool({
        name: 'create_report',
        arguments: { project_id: project.id, title: 'Findings', body: 'All good.' },
      });
      const reportId = (report.structuredContent as { id: string }).id;

      // A tool's own failure is a result whose text starts with the code, in both revisions.
      const missing = await client.callTool({
        name: 'get_project',
        arguments: { project_id: 'prj_missing' },
      });
      expect(missing.isError).toBe(true);
      expect((missing.content[0] as { text: string }).text).toMatch(/^NOT_FOUND: /);

      // An unknown tool: 2026-07-28 prescribes the JSON-RPC error -32602; 2025-11-25 keeps the result.
      if (pin) {
        const err = await client.callTool({ name: 'no_such_tool', arguments: {} }).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(ProtocolError);
        expect((err as ProtocolError).code).toBe(-32602);
      } else {
        const unknown = await client.callTool({ name: 'no_such_tool', arguments: {} });
        expect((unknown.content[0] as { text: string }).text).toMatch(/^INVALID_REQUEST: .*no_such_tool/);
      }

      const listed = await client.listResources();
      expect(listed.resources.map((r) => r.uri)).toContain(`svc://reports/${reportId}`);
      const read = await client.readResource({ uri: `svc://reports/${reportId}` });
      expect((read.contents[0] as { text: string }).text).toBe('# Findings\n\nAll good.');
      // A missing resource is "resource not found" to the client in both revisions (on the wire: -32002
      // in 2025-11-25, -32602 in 2026-07-28; the raw check is below).
      const gone = await client.readResource({ uri: 'svc://reports/rpt_missing' }).catch((e: unknown) => e);
      expect(gone).toBeInstanceOf(ResourceNotFoundError);
      await client.close();
    });
  }
});

describe('the 2026-07-28 wire', () => {
  it('server/discover lists both revisions, the capabilities and who answers, with resultType and caching hints', async () => {
    const res = await modern('server/discover');
    expect(res.status).toBe(200);
    const { result } = await jsonAs<RpcAnswer>(res);
    expect(result).toMatchObject({
      resultType: 'complete',
      supportedVersions: [MODERN, '2025-11-25'],
      capabilities: { tools: {}, resources: {} },
      ttlMs: 300_000,
      cacheScope: 'public',
    });
    expect(
      (result!._meta as Record<string, { name: string }>)['io.modelcontextprotocol/serverInfo']?.name,
    ).toBe('svc-platform');
  });

  it('says on list results how long they stay fresh and that they are the caller’s own', async () => {
    const tools = (await jsonAs<RpcAnswer>(await modern('tools/list'))).result!;
    expect(tools).toMatchObject({ resultType: 'complete', ttlMs: 300_000, cacheScope: 'private' });
    const resources = (await jsonAs<RpcAnswer>(await modern('resources/list'))).result!;
    expect(resources).toMatchObject({ resultType: 'complete', ttlMs: 0, cacheScope: 'private' });
  });

  it('answers a missing resource -32602 with its uri, as 2026-07-28 prescribes', async () => {
    const uri = 'svc://reports/rpt_missing';
    const { error } = await jsonAs<RpcAnswer>(await modern('resources/read', { uri }));
    expect(error?.code).toBe(-32602);
    expect(error?.data).toEqual({ uri });
    expect(error?.message).toMatch(/^NOT_FOUND: /);
  });

  it('answers tools/call with resultType and the structured result', async () => {
    const res = await modern('tools/call', { name: 'list_projects', arguments: {} });
    const { id, result } = await jsonAs<RpcAnswer>(res);
    expect(id).toBe(7);
    expect(result).toMatchObject({ resultType: 'complete', structuredContent: { data: anyOf(Array) } });
  });

  it('refuses headers that disagree with the body (-32020) and a revision it does not serve (-32022)', async () => {
    const mismatch = await modern('tools/list', {}, { 'mcp-method': 'tools/call' });
    expect(mismatch.status).toBe(400);
    expect((await jsonAs<RpcAnswer>(mismatch)).error?.code).toBe(-32020);
    const wrongName = await modern(
      'tools/call',
      { name: 'list_projects', arguments: {} },
      { 'mcp-name': 'get_project' },
    );
    expect((await jsonAs<RpcAnswer>(wrongName)).error?.code).toBe(-32020);

    const future = await fetch(endpoint, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2099-01-01',
        'mcp-method': 'tools/list',
        ...auth(),
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 8,
        method: 'tools/list',
        params: { _meta: { ...META, 'io.modelcontextprotocol/protocolVersion': '2099-01-01' } },
      }),
    });
    expect(future.status).toBe(400);
    const body = await jsonAs<RpcAnswer>(future);
    expect(body.error?.code).toBe(-32022);
    expect(body.id).toBe(8);
  });

  it('keeps the 401 challenge, the Origin check and x-svc-organisation in front of the 2026-07-28 handler', async () => {
    const anonymous = await modern('tools/list', {}, { authorization: '' });
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get('www-authenticate')).toBe(
      `Bearer resource_metadata="${server.v2Url}/.well-known/oauth-protected-resource/mcp/platform"`,
    );
    expect((await modern('tools/list', {}, { origin: 'https://evil.example' })).status).toBe(403);
    const other = await createUser(server);
    expect((await modern('tools/list', {}, { 'x-svc-organisation': other.clientId })).status).toBe(403);
  });
});
