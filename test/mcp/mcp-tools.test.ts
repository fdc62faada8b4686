import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import {
  fileContentOut,
  fileOut,
  listOf,
  projectDetailOut,
  projectOut,
  reportOut,
  reportSummaryOut,
  shareOut,
} from '../../src/projects/schema.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createUser, type TestUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { anyOf, matching } from '../helpers/json.js';

// Every platform tool through the MCP SDK Client over Streamable HTTP, with a real platform access
// token, against the real server and database (CONTRACT §10).

let server: TestServer;
let alice: TestUser;
let bob: TestUser;
let mcp: Client;

async function connect(token: string, headers: Record<string, string> = {}): Promise<Client> {
  const c = new Client({ name: 'svc-test-editor', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL('/mcp/platform', server.v2Url), {
    requestInit: { headers: { authorization: `Bearer ${token}`, ...headers } },
  });
  await c.connect(transport);
  return c;
}

// Each tool's output schema, the same zod objects mcp/tools-*.ts declare as outputSchema.
const deleted = z.object({ deleted: z.literal(true) });
const OUTPUT = {
  list_projects: listOf(projectOut),
  get_project: projectDetailOut,
  create_project: projectOut,
  update_project: projectDetailOut,
  delete_project: deleted,
  fork_project: projectOut,
  transfer_project: projectOut,
  list_reports: listOf(reportSummaryOut),
  get_report: reportOut,
  create_report: reportOut,
  update_report: reportOut,
  delete_report: deleted,
  list_files: listOf(fileOut),
  read_file: fileContentOut,
  write_file: fileOut,
  delete_file: deleted,
  share_project: shareOut,
  create_share_link: shareOut,
  list_shares: listOf(shareOut),
  revoke_share: shareOut,
};
type ToolName = keyof typeof OUTPUT;
type Outputs = { [K in ToolName]: z.infer<(typeof OUTPUT)[K]> };

/**
 * Calls a tool and returns its structuredContent, checked against the tool's output schema; fails the
 * test on an isError result.
 */
async function ok<N extends ToolName>(
  c: Client,
  name: N,
  args: Record<string, unknown> = {},
): Promise<Outputs[N]> {
  const res = (await c.callTool({ name, arguments: args })) as CallToolResult;
  if (res.isError) throw new Error(`${name} failed: ${JSON.stringify(res.content)}`);
  expect(JSON.parse((res.content[0] as { text: string }).text)).toEqual(res.structuredContent);
  // readJson's check, spelled out: TypeScript cannot resolve a schema indexed by a generic name.
  const schema: z.ZodType = OUTPUT[name];
  schema.parse(res.structuredContent);
  return res.structuredContent as Outputs[N];
}

async function fails(c: Client, name: string, args: Record<string, unknown> = {}): Promise<string> {
  const res = (await c.callTool({ name, arguments: args })) as CallToolResult;
  expect(res.isError).toBe(true);
  return (res.content[0] as { text: string }).text;
}

beforeAll(async () => {
  server = await startTestServer();
  [alice, bob] = await Promise.all([createUser(server), createUser(server)]);
  const { platform } = await issueTestGrants(server, alice, {
    orgKey: alice.orgKey,
    resources: ['platform'],
  });
  mcp = await connect(platform!);
});
afterAll(async () => {
  await mcp?.close();
  await server?.close();
});

const TOOLS = [
  'list_projects',
  'get_project',
  'create_project',
  'update_project',
  'delete_project',
  'fork_project',
  'transfer_project',
  'list_reports',
  'get_report',
  'create_report',
  'update_report',
  'delete_report',
  'list_files',
  'read_file',
  'write_file',
  'delete_file',
  'share_project',
  'create_share_link',
  'list_shares',
  'revoke_share',
];

describe('tools/list', () => {
  it('lists the twenty tools with titles, input and output schemas and annotations', async () => {
    const { tools } = await mcp.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([...TOOLS].sort());
    for (const t of tools) {
      expect(t.title, t.name).toBeTruthy();
      expect(t.inputSchema.type).toBe('object');
      expect(t.outputSchema?.type, t.name).toBe('object');
      expect(typeof t.annotations?.readOnlyHint, t.name).toBe('boolean');
      expect(typeof t.annotations?.destructiveHint, t.name).toBe('boolean');
    }
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    expect(byName.list_projects!.annotations).toMatchObject({ readOnlyHint: true });
    expect(byName.delete_project!.annotations).toMatchObject({ readOnlyHint: false, destructiveHint: true });
    expect(byName.write_file!.inputSchema.properties).toHaveProperty('encoding');
    expect(Object.keys(byName.fork_project!.inputSchema.properties ?? {}).sort()).toEqual([
      'name',
      'project_id',
      'target_org_id',
    ]);
  });
});

describe('project tools', () => {
  it('create, get, list, update, fork, transfer, delete — same fields as REST', async () => {
    const p = await ok(mcp, 'create_project', {
      name: 'Editor project',
      description: 'via MCP',
      brief: 'Brief **one**',
    });
    expect(p).toMatchObject({ org_id: alice.clientId, name: 'Editor project', forked_from_id: null });
    // Same object as the REST route answers.
    const rest = await client(server.url).get(`/v1/projects/${p.id}`, { token: alice.session });
    expect(await ok(mcp, 'get_project', { project_id: p.id })).toEqual(rest.body);
    const list = await ok(mcp, 'list_projects', {});
    expect(list.data.map((x: { id: string }) => x.id)).toContain(p.id);
    expect((await ok(mcp, 'list_projects', { org_id: alice.orgId, limit: 1 })).data).toHaveLength(1);
    const updated = await ok(mcp, 'update_project', { project_id: p.id, brief: 'Brief two' });
    expect(updated.brief).toBe('Brief two');

    const fork = await ok(mcp, 'fork_project', { project_id: p.id });
    expect(fork).toMatchObject({ name: 'Editor project (fork)', forked_from_id: p.id });
    const fork2 = await ok(mcp, 'fork_project', { project_id: p.id });
    expect(fork2.name).toBe('Editor project (fork 2)');

    const other = await createUser(server); // alice owns a second client only via membership as owner
    await addMember(server, other.orgKey, alice.userId, 'owner');
    const moved = await ok(mcp, 'transfer_project', { project_id: fork2.id, target_org_id: other.orgId });
    expect(moved.org_id).toBe(other.clientId);

    expect(await ok(mcp, 'delete_project', { project_id: fork.id })).toEqual({ deleted: true });
    expect(await fails(mcp, 'get_project', { project_id: fork.id })).toMatch(/^NOT_FOUND: /);
  });
});

describe('report tools and resources', () => {
  it('creates, reads, lists, updates and deletes reports; lists and reads them as resources', async () => {
    const p = await ok(mcp, 'create_project', { name: 'Reports' });
    const r = await ok(mcp, 'create_report', {
      project_id: p.id,
      title: 'Findings',
      body: '# Heading\n\ntext',
    });
    expect(r).toEqual({
      id: matching(/^rpt_/),
      project_id: p.id,
      title: 'Findings',
      body: '# Heading\n\ntext',
      created_at: anyOf(Number),
      updated_at: anyOf(Number),
    });
    expect(await ok(mcp, 'get_report', { report_id: r.id })).toEqual(r);
    expect((await ok(mcp, 'list_reports', { project_id: p.id })).data).toEqual([
      { id: r.id, project_id: p.id, title: 'Findings', created_at: r.created_at, updated_at: r.updated_at },
    ]);
    const u = await ok(mcp, 'update_report', { report_id: r.id, body: 'changed' });
    expect(u).toMatchObject({ title: 'Findings', body: 'changed' });

    const { resources } = await mcp.listResources();
    const res = resources.find((x) => x.uri === `svc://reports/${r.id}`);
    expect(res).toMatchObject({ mimeType: 'text/markdown', title: 'Reports: Findings' });
    const read = await mcp.readResource({ uri: `svc://reports/${r.id}` });
    expect(read.contents[0]).toMatchObject({ mimeType: 'text/markdown', text: '# Findings\n\nchanged' });

    expect((await ok(mcp, 'get_project', { project_id: p.id })).report_count).toBe(1);
    expect(await ok(mcp, 'delete_report', { report_id: r.id })).toEqual({ deleted: true });
    expect(await fails(mcp, 'get_report', { report_id: r.id })).toMatch(/^NOT_FOUND: /);
    await expect(mcp.readResource({ uri: `svc://reports/${r.id}` })).rejects.toThrow(/NOT_FOUND/);
  });
});

describe('file tools', () => {
  it('writes text and base64, reads them back, lists, replaces and deletes', async () => {
    const p = await ok(mcp, 'create_project', { name: 'Files' });
    const text = await ok(mcp, 'write_file', { project_id: p.id, path: 'notes/plan.md', content: 'héllo' });
    expect(text).toMatchObject({ path: 'notes/plan.md', media_type: 'text/markdown', size: 6 });
    expect(text.sha256).toBe(createHash('sha256').update('héllo').digest('hex'));
    const bytes = Buffer.from([0, 1, 2, 255]);
    const bin = await ok(mcp, 'write_file', {
      project_id: p.id,
      path: 'data.bin',
      content: bytes.toString('base64'),
      encoding: 'base64',
    });
    expect(bin).toMatchObject({ media_type: 'application/octet-stream', size: 4 });

    expect(await ok(mcp, 'read_file', { project_id: p.id, path: 'notes/plan.md' })).toMatchObject({
      encoding: 'utf8',
      content: 'héllo',
    });
    expect(await ok(mcp, 'read_file', { project_id: p.id, file_id: bin.id })).toMatchObject({
      encoding: 'base64',
      content: bytes.toString('base64'),
    });
    expect(
      (await ok(mcp, 'list_files', { project_id: p.id })).data.map((f: { path: string }) => f.path),
    ).toEqual(['data.bin', 'notes/plan.md']);

    const replaced = await ok(mcp, 'write_file', {
      project_id: p.id,
      path: 'notes/plan.md',
      content: 'v2',
      media_type: 'text/plain',
    });
    expect(replaced).toMatchObject({ id: text.id, size: 2, media_type: 'text/plain' });

    expect(await ok(mcp, 'delete_file', { project_id: p.id, path: 'data.bin' })).toEqual({ deleted: true });
    expect(await fails(mcp, 'read_file', { project_id: p.id, file_id: bin.id })).toMatch(/^NOT_FOUND: /);
    expect(await fails(mcp, 'write_file', { project_id: p.id, path: '../escape', content: 'x' })).toMatch(
      /^VALIDATION_ERROR: /,
    );
  });

  it('refuses a file over 5 MB', async () => {
    const p = await ok(mcp, 'create_project', { name: 'Big' });
    const big = Buffer.alloc(5 * 1024 * 1024 + 1).toString('base64');
    expect(
      await fails(mcp, 'write_file', { project_id: p.id, path: 'big.bin', content: big, encoding: 'base64' }),
    ).toMatch(/^FILE_TOO_LARGE: /);
  });

  it('forks copy reports and files and leave the original untouched', async () => {
    const p = await ok(mcp, 'create_project', { name: 'Copied', brief: 'b' });
    await ok(mcp, 'create_report', { project_id: p.id, title: 'R', body: 'x' });
    await ok(mcp, 'write_file', { project_id: p.id, path: 'a.txt', content: 'A' });
    const fork = await ok(mcp, 'fork_project', { project_id: p.id, name: 'Copy' });
    expect(await ok(mcp, 'get_project', { project_id: fork.id })).toMatchObject({
      brief: 'b',
      report_count: 1,
      file_count: 1,
    });
    expect(await ok(mcp, 'read_file', { project_id: fork.id, path: 'a.txt' })).toMatchObject({
      content: 'A',
    });
    await ok(mcp, 'write_file', { project_id: fork.id, path: 'a.txt', content: 'changed' });
    expect(await ok(mcp, 'read_file', { project_id: p.id, path: 'a.txt' })).toMatchObject({ content: 'A' });
  });
});

describe('share tools', () => {
  it('shares with a registered e-mail, creates a link, lists and revokes', async () => {
    const p = await ok(mcp, 'create_project', {
      name: 'Shared',
      brief: '**bold** <script>alert(1)</script>',
    });
    await ok(mcp, 'create_report', {
      project_id: p.id,
      title: 'Public report',
      body: '[x](javascript:alert(1)) *ok*',
    });
    const share = await ok(mcp, 'share_project', {
      project_id: p.id,
      email: bob.email.toUpperCase(),
      role: 'editor',
    });
    expect(share).toMatchObject({
      kind: 'user',
      role: 'editor',
      user_id: bob.userId,
      email: bob.email,
      revoked_at: null,
    });
    // Sharing again changes the role of the same share.
    expect(
      await ok(mcp, 'share_project', { project_id: p.id, email: bob.email, role: 'viewer' }),
    ).toMatchObject({ id: share.id, role: 'viewer' });
    expect(
      await fails(mcp, 'share_project', { project_id: p.id, email: 'nobody@example.test', role: 'viewer' }),
    ).toMatch(/^USER_NOT_FOUND: /);

    const link = await ok(mcp, 'create_share_link', { project_id: p.id });
    expect(link.url).toMatch(new RegExp(`^${server.v2Url.replace(/\./g, '\\.')}/s/[A-Za-z0-9_-]{43}$`));
    expect(link).toMatchObject({ kind: 'link', role: 'viewer' });

    const listed = await ok(mcp, 'list_shares', { project_id: p.id });
    expect(listed.data.map((s: { id: string }) => s.id).sort()).toEqual([share.id, link.id].sort());
    expect(listed.data.every((s: { url?: string }) => s.url === undefined)).toBe(true);

    // The public page: brief and reports, markdown rendered without raw HTML or script URLs.
    const page = await fetch(link.url!);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('<strong>bold</strong>');
    expect(html).toContain('&lt;script&gt;');
    expect(html).not.toContain('<script>');
    expect(html).not.toMatch(/href="javascript:/i);
    expect(html).toContain('Public report');
    expect(page.headers.get('content-security-policy')).toContain("script-src 'none'");

    const revoked = await ok(mcp, 'revoke_share', { share_id: link.id });
    expect(revoked.revoked_at).toEqual(anyOf(Number));
    expect((await fetch(link.url!)).status).toBe(404);
    expect((await fetch(`${server.v2Url}/s/not-a-real-token-at-all-xxxxxxxxxxxxxxx`)).status).toBe(404);
    expect(await fails(mcp, 'revoke_share', { share_id: 'shr_unknown' })).toMatch(/^NOT_FOUND: /);
  });

  it('deleting a project removes its reports, files and shares', async () => {
    const p = await ok(mcp, 'create_project', { name: 'Short-lived' });
    const r = await ok(mcp, 'create_report', { project_id: p.id, title: 'R' });
    await ok(mcp, 'write_file', { project_id: p.id, path: 'x.txt', content: 'x' });
    const link = await ok(mcp, 'create_share_link', { project_id: p.id });
    expect((await fetch(link.url!)).status).toBe(200);
    await ok(mcp, 'delete_project', { project_id: p.id });
    expect((await fetch(link.url!)).status).toBe(404);
    expect(await fails(mcp, 'get_report', { report_id: r.id })).toMatch(/^NOT_FOUND: /);
    const { queryRows } = await import('../../src/db/client.js');
    const { sql } = await import('drizzle-orm');
    const left = await queryRows<{ n: number }>(
      server.deps.db,
      sql`select (select count(*) from project_reports where project_id = ${p.id})
            + (select count(*) from project_files where project_id = ${p.id})
            + (select count(*) from project_shares where project_id = ${p.id}) as n`,
    );
    expect(Number(left[0]!.n)).toBe(0);
  });
});
