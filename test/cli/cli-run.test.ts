import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { and, eq } from 'drizzle-orm';
import { modelSuite } from '../helpers/model-suite.js';
import { CLI_TEST_TIMEOUT_MS, type CliHome, cliHome, runCli, startCli } from '../helpers/cli.js';
import { orgAccountRow } from '../helpers/billing.js';
import { billingEntries } from '../../src/db/schema.js';
import type { ChatRequest } from '../helpers/fake-upstream.js';
import { parseAs } from '../helpers/json.js';
import { eventually } from '../helpers/eventually.js';

// `svc run`: the run WebSocket driven by the real CLI process, the agent's tools executed in a temporary
// working directory. The fake provider decides the tool calls from the conversation it is sent, so each
// step is known, and every step's debit is checked against the ledger.

const suite = modelSuite();
let home: CliHome;
let work: string;
let outside: string;

beforeAll(async () => {
  home = await cliHome();
});
afterAll(async () => {
  await home?.cleanup();
});
beforeEach(async () => {
  outside = await mkdtemp(join(tmpdir(), 'svc-run-'));
  work = join(outside, 'project');
  await mkdir(work);
  await writeFile(join(work, 'notes.txt'), 'alpha beta gamma');
  await writeFile(join(outside, 'secret.txt'), 'TOP-SECRET-OUTSIDE');
  // A signed-in terminal: the svc_ key entry `svc login --api-key` writes (that flow has its own test).
  await home.writeCredentials({
    version: 1,
    servers: {
      [suite.server.url]: { api_key: { token: suite.key, org: suite.owner.orgId, email: suite.owner.email } },
    },
  });
  return () => rm(outside, { recursive: true, force: true });
});

const run = (args: string[]) =>
  runCli(['run', '--url', suite.server.url, ...args], { env: home.env, cwd: work });
const usageAmounts = async () =>
  (
    await suite.server.deps.db
      .select()
      .from(billingEntries)
      .where(and(eq(billingEntries.orgKey, suite.owner.orgKey), eq(billingEntries.type, 'usage')))
      // In the order written: a query without ORDER BY returns whatever order its plan gives.
      .orderBy(billingEntries.id)
  ).map((r) => Number(r.amount));

/** The tool results the provider was sent, in order. */
/** What run_command answers the model (src/cli/tools.ts). */
interface CommandResult {
  exit_code: number | null;
  output: string;
  timed_out: boolean;
  truncated: boolean;
}

const toolResults = (body: ChatRequest) =>
  body.messages
    .filter((m) => m.role === 'tool')
    .map((m) => (typeof m.content === 'string' ? m.content : JSON.stringify(m.content)));

describe('svc run', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('two tool round trips really read and write files here; steps and the exact debit are shown', async () => {
    suite.fake.reply = (body) => {
      const results = toolResults(body);
      if (results.length === 0)
        return { toolCalls: [{ name: 'read_file', arguments: '{"path":"notes.txt"}' }] };
      if (results.length === 1) {
        const content = `summary of: ${results[0]}`;
        return {
          toolCalls: [
            { name: 'write_file', arguments: JSON.stringify({ path: 'out/summary.txt', content }) },
          ],
        };
      }
      return { content: 'All done here' };
    };
    const before = (await usageAmounts()).length;
    const res = await run(['--yes', 'summarize', 'notes.txt']);
    expect(res.code, res.stderr).toBe(0);
    expect(await readFile(join(work, 'out/summary.txt'), 'utf8')).toBe('summary of: alpha beta gamma');
    expect(res.stdout).toContain('All done here');
    expect(res.stderr).toContain('→ read_file notes.txt');
    expect(res.stderr).toContain('→ write_file out/summary.txt');
    // Three model calls: two tool calls (10 + 2 × 5 each) and the answer (10 + 2 × 3).
    const rows = (await usageAmounts()).slice(before);
    expect(rows).toEqual([20, 20, 16]);
    expect(res.stderr).toMatch(
      /finished \(completed\) in 3 steps: 56 tokens · \$0\.056 debited · balance 9,944 tokens · \$9\.944$/m,
    );
    expect(suite.fake.requests.at(-3)!.body.messages.at(-1)).toEqual({
      role: 'user',
      content: 'summarize notes.txt',
    });
  });

  it('refuses paths that leave the working directory: .., absolute, and a symlink out', async () => {
    await symlink(join(outside, 'secret.txt'), join(work, 'link.txt'));
    await symlink(outside, join(work, 'up'));
    suite.fake.reply = (body) =>
      toolResults(body).length === 0
        ? {
            toolCalls: [
              { name: 'read_file', arguments: '{"path":"../secret.txt"}' },
              { name: 'read_file', arguments: JSON.stringify({ path: join(outside, 'secret.txt') }) },
              { name: 'read_file', arguments: '{"path":"link.txt"}' },
              { name: 'write_file', arguments: '{"path":"up/planted.txt","content":"x"}' },
            ],
          }
        : { content: 'ok' };
    const res = await run(['--yes', 'read', 'the', 'secret']);
    expect(res.code, res.stderr).toBe(0);
    const results = toolResults(suite.fake.requests.at(-1)!.body);
    expect(results).toHaveLength(4);
    expect(results[0]).toContain('refused: paths may not contain ".."');
    expect(results[1]).toContain('refused: absolute paths are not allowed');
    expect(results[2]).toContain('refused: link.txt leads outside the working directory');
    expect(results[3]).toContain('refused: up/planted.txt leads outside the working directory');
    expect(results.join()).not.toContain('TOP-SECRET');
    expect(existsSync(join(outside, 'planted.txt'))).toBe(false);
  });

  it('does not write or run anything unconfirmed: no terminal to ask, or --allow read', async () => {
    suite.fake.reply = (body) =>
      toolResults(body).length === 0
        ? {
            toolCalls: [
              { name: 'list_directory', arguments: '{"path":"."}' },
              { name: 'write_file', arguments: '{"path":"new.txt","content":"hi"}' },
              { name: 'run_command', arguments: '{"command":"touch ran.txt"}' },
            ],
          }
        : { content: 'ok' };
    for (const extra of [[], ['--allow', 'read']]) {
      const res = await run([...extra, 'try', 'things']);
      expect(res.code, res.stderr).toBe(0);
      const results = toolResults(suite.fake.requests.at(-1)!.body);
      expect(results[0]).toBe('notes.txt');
      // svc marks a tool_result with status "error" for the model (docs/models.md).
      expect(results[1]).toBe('[error] the user did not allow this');
      expect(results[2]).toBe('[error] the user did not allow this');
      expect(existsSync(join(work, 'new.txt'))).toBe(false);
      expect(existsSync(join(work, 'ran.txt'))).toBe(false);
    }
  });

  it('runs a command in the working directory with a timeout and an output cap', async () => {
    suite.fake.reply = (body) =>
      toolResults(body).length === 0
        ? {
            toolCalls: [
              {
                name: 'run_command',
                arguments: '{"command":"pwd; head -c 5000 /dev/zero | tr \'\\\\0\' x"}',
              },
              { name: 'run_command', arguments: '{"command":"sleep 20; touch late.txt"}' },
            ],
          }
        : { content: 'ok' };
    const started = Date.now();
    const res = await run(['--yes', '--output-cap', '1000', '--command-timeout', '1', 'do', 'it']);
    expect(res.code, res.stderr).toBe(0);
    expect(Date.now() - started).toBeLessThan(15_000);
    const [capped, slow] = toolResults(suite.fake.requests.at(-1)!.body).map((r) =>
      parseAs<CommandResult>(r),
    );
    expect(capped).toMatchObject({ exit_code: 0, truncated: true, timed_out: false });
    expect(capped!.output).toHaveLength(1000);
    expect(capped!.output.startsWith(`${work}\n`)).toBe(true);
    expect(slow).toMatchObject({ timed_out: true, exit_code: null });
    expect(existsSync(join(work, 'late.txt'))).toBe(false);
  });

  it('Ctrl-C mid-run cancels it: billed for what ran, nothing more, nothing left held', async () => {
    const longAnswer = Array.from({ length: 400 }, (_, i) => `word${i}`).join(' ');
    suite.fake.reply = (body) =>
      toolResults(body).length === 0
        ? { toolCalls: [{ name: 'list_directory', arguments: '{"path":"."}' }] }
        : { content: longAnswer };
    const before = (await usageAmounts()).length;
    const aborted = suite.fake.abortedStreams;
    const requestsBefore = suite.fake.requests.length;
    suite.fake.chunkDelayMs = 20; // the answer streams slowly: 400 words take 8 s
    const cli = startCli(['run', '--url', suite.server.url, '--yes', 'list', 'then', 'talk'], {
      env: home.env,
      cwd: work,
    });
    await cli.waitFor(/→ list_directory/);
    // Interrupt the second model call part-way.
    await eventually(() => suite.fake.requests.length >= requestsBefore + 2, 20_000, 'the second model call');
    const wordsBefore = suite.fake.contentChunksSent;
    await eventually(
      () => suite.fake.contentChunksSent >= wordsBefore + 10,
      20_000,
      'words of the answer sent',
    );
    cli.child.kill('SIGINT');
    expect(await cli.exit).toBe(130);
    expect(cli.stderr()).toContain('Run cancelled');
    // The server learns of the closed socket, aborts the provider's stream and settles: each step reaches
    // the fake and the ledger a moment after the CLI has exited, later on a loaded machine. Wait (bounded).
    const settled = async () => (await usageAmounts()).length >= before + 2;
    await eventually(
      async () => suite.fake.abortedStreams >= aborted + 1 && (await settled()),
      20_000,
      'the interrupted call aborted at the provider and settled',
    );
    expect(suite.fake.abortedStreams).toBe(aborted + 1);
    const rows = (await usageAmounts()).slice(before);
    expect(rows).toHaveLength(2);
    expect(rows[0]).toBe(20);
    // The interrupted call: its prompt and the words it streamed, far less than the full answer.
    expect(rows[1]).toBeGreaterThan(10);
    expect(rows[1]).toBeLessThan(10 + 2 * 400);
    const account = await orgAccountRow(suite.server, suite.owner.orgKey);
    expect(account.held).toBe(0);
    expect(account.balance).toBe(10_000 - rows[0]! - rows[1]!);
  });
});
