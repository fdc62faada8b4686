import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  Client as ClientV2,
  ProtocolError,
  StreamableHTTPClientTransport as TransportV2,
} from '@modelcontextprotocol/client';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { jsonAs } from '../helpers/json.js';

// Tool selection and the read-only grant (CONTRACT §10 "Tool selection"): X-MCP-Toolsets,
// X-MCP-Readonly and /mcp/platform/readonly narrow tools/list and what may be called (outside the
// selection = unknown tool); a `platform:read` grant lists and calls only read-only tools, and calling
// another is HTTP 403 insufficient_scope naming `platform` (step-up). With the SDK clients v1
// (2025-11-25) and v2 (2026-07-28).

const MODERN = '2026-07-28';
const READ_ONLY = [
  'list_projects',
  'get_project',
  'list_reports',
  'get_report',
  'list_files',
  'read_file',
  'list_shares',
];
const REPORTS_AND_FILES = [
  'list_reports',
  'get_report',
  'create_report',
  'update_report',
  'delete_report',
  'list_files',
  'read_file',
  'write_file',
  'delete_file',
];

let server: TestServer;
let user: TestUser;
let full: string;
let readGrant: string;
let metadataUrl: string;

beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
  full = (await issueTestGrants(server, user, { orgKey: user.orgKey, resources: ['platform'] })).platform!;
  readGrant = (
    await issueTestGrants(server, user, {
      orgKey: user.orgKey,
      resources: ['platform'],
      scope: 'platform:read',
    })
  ).platform!;
  metadataUrl = `${server.v2Url}/.well-known/oauth-protected-resource/mcp/platform`;
});
afterAll(async () => {
  await server?.close();
});

type Revision = 'v1 2025-11-25' | 'v2 2026-07-28';
const REVISIONS: Revision[] = ['v1 2025-11-25', 'v2 2026-07-28'];

interface Session {
  names(): Promise<string[]>;
  /** The tool's answer: a result, or the JSON-RPC error code when the call was refused. */
  call(
    name: string,
    args: Record<string, unknown>,
  ): Promise<{ isError?: boolean; text?: string; code?: number }>;
  close(): Promise<void>;
}

async function open(
  revision: Revision,
  token: string,
  headers: Record<string, string> = {},
  path = '/mcp/platform',
) {
  const url = new URL(path, server.v2Url);
  const requestInit = { headers: { authorization: `Bearer ${token}`, ...headers } };
  const client =
    revision === 'v1 2025-11-25'
      ? new ClientV1({ name: 'selection-v1', version: '1.0.0' })
      : new ClientV2(
          { name: 'selection-v2', version: '1.0.0' },
          { versionNegotiation: { mode: { pin: MODERN } } },
        );
  await client.connect(
    revision === 'v1 2025-11-25'
      ? new TransportV1(url, { requestInit })
      : new TransportV2(url, { requestInit }),
  );
  const session: Session = {
    names: async () => (await client.listTools()).tools.map((t) => t.name),
    async call(name, args) {
      try {
        const r = (await client.callTool({ name, arguments: args })) as {
          isError?: boolean;
          content: { text?: string }[];
        };
        return { isError: r.isError, text: r.content[0]?.text };
      } catch (err) {
        if (err instanceof ProtocolError) return { code: err.code };
        throw err;
      }
    },
    close: () => client.close(),
  };
  return session;
}

/** An unknown tool: a JSON-RPC -32602 in 2026-07-28, an INVALID_REQUEST tool result in 2025-11-25. */
function expectUnknown(revision: Revision, answer: { isError?: boolean; text?: string; code?: number }) {
  if (revision === 'v2 2026-07-28') expect(answer.code).toBe(-32602);
  else expect(answer.text).toMatch(/^INVALID_REQUEST: /);
}

function raw(token: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${server.v2Url}/mcp/platform`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      authorization: `Bearer ${token}`,
      ...headers,
    },
    body: JSON.stringify(body),
  });
}

describe.each(REVISIONS)('tool selection (%s)', (revision) => {
  it('X-MCP-Toolsets lists and calls only the chosen toolsets', async () => {
    const s = await open(revision, full, { 'X-MCP-Toolsets': 'reports, files' });
    expect(await s.names()).toEqual(REPORTS_AND_FILES);
    expectUnknown(revision, await s.call('create_project', { name: 'outside the selection' }));
    expectUnknown(revision, await s.call('list_shares', { project_id: 'prj_x' }));
    expect((await s.call('list_files', { project_id: 'prj_missing' })).text).toMatch(/^NOT_FOUND: /);
    await s.close();
  });

  it('X-MCP-Readonly: true and /mcp/platform/readonly list and call only read-only tools', async () => {
    for (const [headers, path] of [
      [{ 'X-MCP-Readonly': 'true' }, '/mcp/platform'],
      [{}, '/mcp/platform/readonly'],
    ] as const) {
      const s = await open(revision, full, headers, path);
      expect(await s.names(), path).toEqual(READ_ONLY);
      expectUnknown(revision, await s.call('create_project', { name: 'refused' }));
      const listed = await s.call('list_projects', {});
      expect(listed.isError, path).toBeFalsy();
      await s.close();
    }
    const both = await open(revision, full, { 'X-MCP-Toolsets': 'shares', 'X-MCP-Readonly': 'true' });
    expect(await both.names()).toEqual(['list_shares']);
    await both.close();
  });

  it('a platform:read grant lists the read-only tools and is sent to step up for the others', async () => {
    const s = await open(revision, readGrant);
    expect(await s.names()).toEqual(READ_ONLY);
    expect((await s.call('list_projects', {})).isError).toBeFalsy();
    await s.close();
    const res = await raw(
      readGrant,
      {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'create_project', arguments: { name: 'x' } },
      },
      revision === 'v2 2026-07-28' ? { 'mcp-protocol-version': MODERN } : {},
    );
    expect(res.status).toBe(403);
    expect(res.headers.get('www-authenticate')).toBe(
      `Bearer error="insufficient_scope", scope="platform", resource_metadata="${metadataUrl}"`,
    );
    // Narrowed further by the toolsets: a write tool outside them is unknown, not a step-up.
    const shares = await open(revision, readGrant, { 'X-MCP-Toolsets': 'shares' });
    expect(await shares.names()).toEqual(['list_shares']);
    expectUnknown(revision, await shares.call('create_project', { name: 'x' }));
    await shares.close();
  });
});

describe('selection mistakes', () => {
  it('answers an unknown toolset or a bad X-MCP-Readonly with 400 naming the header', async () => {
    const list = { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} };
    const unknown = await raw(full, list, { 'X-MCP-Toolsets': 'projects,billing' });
    expect(unknown.status).toBe(400);
    const body = await jsonAs<{ error: { code: number; message: string } }>(unknown);
    expect(body.error.code).toBe(-32600);
    expect(body.error.message).toMatch(/X-MCP-Toolsets: unknown toolset "billing"/);
    const bad = await raw(full, list, { 'X-MCP-Readonly': 'maybe' });
    expect(bad.status).toBe(400);
  });
});
