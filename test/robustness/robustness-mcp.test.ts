import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { pool, rawRequest } from '../helpers/raw-http.js';
import { TOOLS_BY_NAME } from '../../mcp/selection.js';

// Every platform tool called with hostile arguments (CONTRACT §3, §10): a tool failure is an `isError`
// result or a JSON-RPC error naming the mistake, never an HTTP 5xx and never the INTERNAL fallback.

let server: TestServer;
let user: TestUser;
let platformToken: string;
beforeAll(async () => {
  server = await startTestServer();
  user = await createUser(server);
  platformToken = (
    await issueTestGrants(server, user, { orgKey: user.orgKey, resources: ['platform'], origin: server.url })
  ).platform!;
});
afterAll(async () => {
  await server?.close();
});

const KEYS = [
  'project_id',
  'org_id',
  'name',
  'path',
  'content',
  'title',
  'description',
  'limit',
  'offset',
  'share_id',
  'email',
  'role',
  'target_org_id',
  'query',
  'report_id',
  'body',
  'token',
  'visibility',
  'brief',
];
const VALUES: unknown[] = [
  1e308,
  -1,
  2 ** 63,
  0.5,
  true,
  null,
  {},
  [],
  [1, 'a'],
  'x'.repeat(100_000),
  '../'.repeat(500),
  'ünïcødé ✓ 💩 \u202e',
  '',
  'prj_',
  'client_x',
  '%00',
];

describe('MCP tools under hostile arguments', () => {
  it('never 5xx and never an internal error, for every tool and every hostile value', async () => {
    const findings: string[] = [];
    let toolErrors = 0;
    const calls = [...TOOLS_BY_NAME.keys()].flatMap((tool) => [
      { tool, args: {} },
      { tool, args: 'not an object' },
      ...VALUES.map((v) => ({ tool, args: Object.fromEntries(KEYS.map((k) => [k, v])) })),
    ]);
    await pool(
      calls.map(({ tool, args }, i) => async () => {
        const res = await rawRequest(server.url, 'POST', '/mcp/platform', {
          headers: {
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            authorization: `Bearer ${platformToken}`,
            'mcp-protocol-version': '2025-06-18',
          },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: i,
            method: 'tools/call',
            params: { name: tool, arguments: args },
          }),
        });
        const answer = res.json as { result?: { isError?: boolean }; error?: unknown } | undefined;
        if (res.status === 200 && answer?.result?.isError === true) toolErrors++;
        const what = `${tool} ${JSON.stringify(args).slice(0, 80)}`;
        if (res.status >= 500) findings.push(`${res.status} ${what}: ${res.text.slice(0, 160)}`);
        else if (/internal error/i.test(res.text))
          findings.push(`internal ${what}: ${res.text.slice(0, 160)}`);
        else if (res.status === 200 && !(answer?.result || answer?.error))
          findings.push(`not JSON-RPC ${what}: ${res.text.slice(0, 160)}`);
      }),
    );
    expect(findings, findings.join('\n')).toEqual([]);
    // The calls reached the tools (not stopped at the transport): most answer as isError results.
    expect(toolErrors).toBeGreaterThan(calls.length / 2);
  });
});
