import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { and, eq } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { orgAccountRow, setOrgBalance } from '../helpers/billing.js';
import {
  approveOnDevicePage,
  CLI_TEST_TIMEOUT_MS,
  cliHome,
  inTerminal as inTerminalAt,
  runCli,
  type CliHome,
} from '../helpers/cli.js';
import { TEST_PRICES } from '../helpers/fake-upstream.js';
import { billingEntries } from '../../src/db/schema.js';

// The CLI as a person meets it: under a real pseudo-terminal (util-linux `script`), against svc's built-in
// model svc-local (no provider configured, as on a fresh machine). Keys are typed into the terminal:
// answering a confirmation prompt, and Ctrl-C (the terminal turns it into SIGINT) mid-command.

let server: TestServer;
let owner: TestUser;
let home: CliHome;
let work: string;

beforeAll(async () => {
  server = await startTestServer({ env: { ...TEST_PRICES } });
  owner = await createUser(server);
  await setOrgBalance(server, owner.orgKey, 10_000);
  home = await cliHome();
  const key = (await createApiToken(server, owner, owner.orgKey)).secret;
  await home.writeCredentials({
    version: 1,
    servers: { [server.url]: { api_key: { token: key, org: owner.orgId, email: owner.email } } },
  });
  work = await mkdtemp(join(tmpdir(), 'svc-tty-'));
});
afterAll(async () => {
  await server?.close();
  await home?.cleanup();
  if (work) await rm(work, { recursive: true, force: true });
});

/** `svc ARGS` inside a pseudo-terminal in the working folder, signed in as the owner. */
const inTerminal = (args: string[], env: Record<string, string> = {}) =>
  inTerminalAt(args, { cwd: work, env: { ...home.env, ...env } });

const usage = async () =>
  (
    await server.deps.db
      .select()
      .from(billingEntries)
      .where(and(eq(billingEntries.orgKey, owner.orgKey), eq(billingEntries.type, 'usage')))
      .orderBy(billingEntries.id)
  ) // in the order written, whatever the plan
    .map((r) => Number(r.amount));

describe('svc in a real terminal', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('asks before a write; "n" refuses it and the run goes on; colour only on the terminal', async () => {
    const t = inTerminal(['run', '--url', server.url, 'write a greeting to greeting.txt']);
    await t.waitFor(/Allow write_file greeting\.txt\?/);
    t.type('n');
    t.type('\r');
    expect(await t.exit).toBe(0);
    expect(existsSync(join(work, 'greeting.txt'))).toBe(false);
    expect(t.screen()).toContain('refused');
    expect(t.screen()).toMatch(/finished \(completed\) in 2 steps/);
    // eslint-disable-next-line no-control-regex -- the escape character is what colour on a terminal is
    expect(t.screen()).toMatch(/\x1b\[3\dm/); // ANSI colour on a terminal

    const plain = inTerminal(['whoami', '--url', 'http://127.0.0.1:9'], { NO_COLOR: '1' });
    expect(await plain.exit).toBe(3);
    expect(plain.screen()).toContain('Error: You are not signed in');
    // eslint-disable-next-line no-control-regex -- the escape character is what colour on a terminal is
    expect(plain.screen()).not.toMatch(/\x1b\[3\dm/);
  });

  it('a spinner while the model thinks and a tool runs, on a terminal only; none in a pipe', async () => {
    const t = inTerminal(['run', '--url', server.url, '--yes', 'run `echo hi` please']);
    expect(await t.exit).toBe(0);
    expect(t.screen()).toContain('Waiting for the model…');
    expect(t.screen()).toContain('Running run_command…');
    const piped = await runCli(['run', '--url', server.url, '--yes', 'run `echo hi` please'], {
      env: home.env,
      cwd: work,
    });
    expect(piped.code, piped.stderr).toBe(0);
    expect(piped.stderr).not.toMatch(/Waiting for the model|Running run_command|[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]/);
    expect(piped.stderr + piped.stdout).not.toContain('\x1b');
  });

  it('--help: examples and a URL for more help; NO_COLOR means not one escape sequence', async () => {
    const t = inTerminal(['run', '--help'], { NO_COLOR: '1' });
    expect(await t.exit).toBe(0);
    expect(t.screen()).toContain('Examples:\r\n  $ svc run "list the files here"');
    expect(t.screen()).toContain(`More help: http://localhost:8080/docs/cli`);
    expect(t.screen()).not.toContain('\x1b');
    const guide = await fetch(`${server.url}/docs/cli`);
    expect(guide.status).toBe(200);
    expect(await guide.text()).toContain('# `svc`, the terminal client');
  });

  it('device login at a terminal: "Press Enter to open the browser" and a spinner while waiting', async () => {
    const t = inTerminal(['login', '--url', server.url], {
      XDG_CONFIG_HOME: join(work, 'fresh'),
      NO_COLOR: '1',
    });
    await t.waitFor(/enter the code [^A-Z]*([B-Z]{4}-[B-Z]{4})/);
    await t.waitFor(/Waiting for the approval/);
    expect(t.screen()).toContain('Press Enter to open the browser.');
    const code = /enter the code [^A-Z]*([B-Z]{4}-[B-Z]{4})/.exec(t.screen())![1]!;
    await approveOnDevicePage(server.v2Url, owner, code);
    expect(await t.exit).toBe(0);
    expect(t.screen()).toContain(`Signed in to ${server.url} as ${owner.email}`);
  });

  it('"y" runs the command; Ctrl-C while it runs stops it and cancels the run, billed for what ran', async () => {
    const before = (await usage()).length;
    const t = inTerminal(['run', '--url', server.url, 'run `sleep 30 && touch late.txt` please']);
    await t.waitFor(/Allow run_command: sleep 30 && touch late\.txt\?/);
    t.type('y');
    t.type('\r');
    // The command has started when its spinner is on the screen: then Ctrl-C.
    await t.waitFor(/Running run_command…/);
    t.type('\x03'); // Ctrl-C: the terminal sends SIGINT to the foreground process group
    expect(await t.exit).toBe(130);
    expect(t.screen()).toContain('Cancelling the run');
    expect(existsSync(join(work, 'late.txt'))).toBe(false);
    // One model call ran (the one that asked for the command); it is billed, and nothing else.
    const rows = (await usage()).slice(before);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toBeGreaterThan(0);
    expect((await orgAccountRow(server, owner.orgKey)).held).toBe(0);
  });
});
