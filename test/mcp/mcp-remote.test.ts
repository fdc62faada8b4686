import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chmod, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport, getDefaultEnvironment } from '@modelcontextprotocol/client/stdio';
import type { Page } from 'playwright-core';
import { browserSuite, haveChromium } from '../helpers/browser.js';
import { createUser, STRONG_PASSWORD, type TestUser } from '../helpers/fixtures.js';
import { eventuallyValue } from '../helpers/eventually.js';
import { verifyAccessToken } from '../../oauth/verify.js';

// mcp-remote (the npm package an editor that speaks only stdio runs to reach a remote MCP server) against
// /mcp/platform, both ways it signs in: the browser flow (discovery from the 401, dynamic registration,
// authorization code + PKCE to its loopback callback, consent in real Chromium) and `--device-code`
// (RFC 8628: it prints the verification URL, a person approves in the browser, it polls). Each time an
// MCP SDK client on mcp-remote's stdio side lists the tools and calls them, as the editor would.
// mcp-remote opens "the browser" through xdg-open, which honours $BROWSER: here a script that writes the
// URL to a file, which the test then opens in Chromium.

// The MCP SDK inside mcp-remote sends credentials over plain http only to localhost, 127.0.0.1 or ::1:
// this server's platform origin (V2_URL) is http://127.0.0.1 (the account API moves to 127.0.0.2).
const suite = browserSuite({
  env: (port) => ({ BASE_URL: `http://127.0.0.2:${port}`, V2_URL: `http://127.0.0.1:${port}` }),
});
const PROXY = createRequire(import.meta.url).resolve('mcp-remote/dist/proxy.js');
let user: TestUser;
let dir: string;

beforeAll(async () => {
  if (!haveChromium) return;
  user = await createUser(suite.server);
  dir = await mkdtemp(join(tmpdir(), 'svc-mcp-remote-'));
  const browser = join(dir, 'browser.sh');
  await writeFile(browser, `#!/bin/sh\nprintf '%s\\n' "$1" >> "${join(dir, 'opened')}"\n`);
  await chmod(browser, 0o755);
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

interface Remote {
  client: Client;
  /** The client's connection: settles once mcp-remote has signed in and relayed the handshake. */
  connecting: Promise<void>;
  /** What mcp-remote wrote to stderr so far (its log: the URLs, the codes, the steps). */
  log: () => string;
}

/** mcp-remote on /mcp/platform with `flags`, its own credential store, and an SDK client on its stdio. */
function startRemote(name: string, flags: string[]): Remote {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [PROXY, `${suite.server.v2Url}/mcp/platform`, '--host', '127.0.0.1', '--allow-http', ...flags],
    env: {
      ...getDefaultEnvironment(),
      MCP_REMOTE_CONFIG_DIR: join(dir, name),
      BROWSER: join(dir, 'browser.sh'),
      DISPLAY: '',
    },
    stderr: 'pipe',
  });
  let log = '';
  transport.stderr?.on('data', (chunk: Buffer) => (log += chunk.toString()));
  const client = new Client({ name: `editor-via-mcp-remote-${name}`, version: '1.0.0' });
  // A failed connection names what mcp-remote said: its log is the only account of the sign-in.
  const connecting = client.connect(transport).catch((err: unknown) => {
    throw new Error(`mcp-remote did not connect: ${String(err)}\n${log}`);
  });
  return { client, log: () => log, connecting };
}

/** Signs the user in on the login page the browser was sent to. */
async function signIn(page: Page) {
  await page.fill('input[name="email"]', user.email);
  await page.fill('input[name="password"]', STRONG_PASSWORD);
  await page.click('button[type="submit"]');
}

/** The editor's part once connected: the twenty tools, a project created and listed back. */
async function useTools(client: Client, projectName: string) {
  const { tools } = await client.listTools();
  expect(tools).toHaveLength(20);
  expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(['list_projects', 'create_project']));
  const created = await client.callTool({ name: 'create_project', arguments: { name: projectName } });
  expect(created.isError).toBeFalsy();
  expect(created.structuredContent).toMatchObject({ name: projectName, org_id: user.clientId });
  const listed = await client.callTool({ name: 'list_projects', arguments: {} });
  const names = (listed.structuredContent as { data: { name: string }[] }).data.map((p) => p.name);
  expect(names).toContain(projectName);
}

/** The access token mcp-remote stored, verified as svc verifies it: the platform resource, this user. */
async function storedAccess(name: string) {
  const files = await readdir(join(dir, name), { recursive: true });
  const tokensFile = files.find((f) => String(f).endsWith('_tokens.json'));
  expect(tokensFile, `tokens stored under ${name}: ${files.join(', ')}`).toBeTruthy();
  const tokens = JSON.parse(await readFile(join(dir, name, String(tokensFile)), 'utf8')) as {
    access_token: string;
    refresh_token?: string;
  };
  expect(tokens.refresh_token).toBeTruthy();
  return verifyAccessToken(suite.server.deps, tokens.access_token, {
    resource: 'platform',
    origin: suite.server.v2Url,
  });
}

describe.skipIf(!haveChromium)('mcp-remote against /mcp/platform', () => {
  it('signs in through the browser (registration, consent, loopback callback) and uses the tools over stdio', async () => {
    const remote = startRemote('browser', []);
    const opened = await eventuallyValue(
      () => readFile(join(dir, 'opened'), 'utf8').catch(() => ''),
      (text) => text.includes('/oauth/authorize'),
      60_000,
      `mcp-remote opening the authorization URL (its log: ${remote.log()})`,
    );
    const authorizeUrl = new URL(opened.trim().split('\n').pop()!);
    expect(authorizeUrl.searchParams.get('client_id')).toMatch(/^dcr_/);
    expect(authorizeUrl.searchParams.get('resource')).toBe(`${suite.server.v2Url}/mcp/platform`);
    const callback = authorizeUrl.searchParams.get('redirect_uri')!;
    expect(new URL(callback).hostname).toBe('127.0.0.1');

    const context = await suite.browser.newContext();
    const page = await context.newPage();
    await page.goto(authorizeUrl.href);
    expect(new URL(page.url()).pathname).toBe('/account/login');
    await Promise.all([page.waitForURL((u) => u.pathname === '/oauth/authorize'), signIn(page)]);
    expect(await page.locator('h1').textContent()).toContain('MCP CLI Proxy');
    await Promise.all([
      page.waitForURL((u) => u.href.startsWith(callback)),
      page.click('button[value="approve"]'),
    ]);
    await context.close();

    await remote.connecting;
    await useTools(remote.client, 'Through mcp-remote, browser');
    await remote.client.close();
    const access = await storedAccess('browser');
    expect(access.userId).toBe(user.userId);
    expect(access.clientId).toMatch(/^dcr_/);
  }, 180_000);

  it('signs in with --device-code (approved in the browser) and uses the tools over stdio', async () => {
    const remote = startRemote('device', ['--device-code']);
    const log = await eventuallyValue(
      remote.log,
      (text) => text.includes('To authorize this client, visit:') && text.includes('Waiting for approval'),
      60_000,
      'mcp-remote printing the verification URL',
    );
    // Each line of mcp-remote's log starts with its process id in brackets.
    const verification = new URL(/To authorize this client, visit:\s*\n(?:\[\d+\])?\s*(\S+)/.exec(log)![1]!);
    expect(verification.origin + verification.pathname).toBe(`${suite.server.v2Url}/account/device`);
    const userCode = /And enter the code: (\S+)/.exec(log)?.[1] ?? verification.searchParams.get('user_code');
    expect(userCode).toBeTruthy();

    const context = await suite.browser.newContext();
    const page = await context.newPage();
    await page.goto(verification.href);
    if (new URL(page.url()).pathname === '/account/login')
      await Promise.all([page.waitForURL((u) => u.pathname === '/account/device'), signIn(page)]);
    if (!verification.searchParams.get('user_code')) {
      await page.fill('input[name="user_code"]', userCode!);
      await page.click('button[type="submit"]');
    }
    await page.waitForSelector('button[value="approve"]');
    await page.click('button[value="approve"]');
    await page.waitForSelector('text=Device connected');
    await context.close();

    await remote.connecting;
    await useTools(remote.client, 'Through mcp-remote, device code');
    await remote.client.close();
    expect(remote.log()).toContain('Authorized.');
    const access = await storedAccess('device');
    expect(access.userId).toBe(user.userId);
  }, 180_000);
});
