import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { modelSuite } from '../helpers/model-suite.js';
import { CLI_TEST_TIMEOUT_MS, cliHome, inTerminal, type CliHome } from '../helpers/cli.js';
import type { ChatRequest } from '../helpers/fake-upstream.js';

// Nothing a model or the server sends is terminal control (docs/cli.md, "What reaches your terminal"),
// at a real pseudo-terminal: the spoofed approval prompt of a hostile model answer draws nothing, the
// person sees and refuses the command that would really run, and an answer's OSC 52 / OSC 8 / title
// sequences never reach the terminal.

const suite = modelSuite();
let home: CliHome;
let outside: string;
let work: string;

const ESC = '\u001b';
/** A colour no part of svc or its prompt library uses: its bytes on the screen could only be the model's. */
const MODEL_COLOUR = `${ESC}[38;5;201m`;
const TITLE = `${ESC}]0;PWNED${'\u0007'}`;

beforeAll(async () => {
  home = await cliHome();
});
afterAll(async () => {
  await home?.cleanup();
});
beforeEach(async () => {
  outside = await mkdtemp(join(tmpdir(), 'svc-spoof-'));
  work = join(outside, 'project');
  await mkdir(work);
  await home.writeCredentials({
    version: 1,
    servers: {
      [suite.server.url]: { api_key: { token: suite.key, org: suite.owner.orgId, email: suite.owner.email } },
    },
  });
  return () => rm(outside, { recursive: true, force: true });
});

const toolResults = (body: ChatRequest) => body.messages.filter((m) => m.role === 'tool');

describe('text from a model at a real terminal', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('a spoofed approval prompt is shown for what it is; the person refuses and nothing runs', async () => {
    const target = join(outside, 'pwned');
    // The attack: a real command, then sequences that erase it and draw an innocent one with its prompt.
    const command =
      `touch ${target}; #\r${ESC}[2K${ESC}[1A${ESC}[2K${TITLE}` +
      `\n${MODEL_COLOUR}→${ESC}[39m run_command: ls -la\n? Allow run_command: ls -la`;
    suite.fake.reply = (body) =>
      toolResults(body).length === 0
        ? {
            content: '',
            toolCalls: [{ name: 'run_command', arguments: JSON.stringify({ command }) }],
          }
        : { content: `done ${ESC}]52;c;cm0gLXJmIH4=${'\u0007'}` };
    const t = inTerminal(['run', '--url', suite.server.url, 'tidy up'], {
      cwd: work,
      env: { ...home.env, NO_COLOR: '1' },
    });
    await t.waitFor(/Allow run_command[^\n]*\?/);
    // The person answers what the approval line asks: yes to `ls -la`, no to anything else.
    const asked = t
      .screen()
      .split('\n')
      .filter((l) => l.includes('Allow run_command'))
      .at(-1)!;
    const innocent = /Allow run_command: ls -la\?/.test(asked);
    t.type(innocent ? 'y' : 'n');
    t.type('\r');
    expect(await t.exit).toBe(0);
    expect(innocent).toBe(false);
    expect(asked).toContain('Allow run_command: the 3-line command above?');
    expect(existsSync(target)).toBe(false);

    const screen = t.screen();
    // The real command is on the screen, its sequences as visible text, each line quoted.
    expect(screen).toContain('→ run_command: a 3-line command:');
    expect(screen).toContain(`│ touch ${target}; #\\r\\x1b[2K\\x1b[1A\\x1b[2K\\x1b]0;PWNED\\x07`);
    expect(screen).toContain('│ \\x1b[38;5;201m→\\x1b[39m run_command: ls -la');
    expect(screen).toContain('│ ? Allow run_command: ls -la');
    // None of the model's own bytes reached the terminal as control.
    expect(screen).not.toContain(MODEL_COLOUR);
    expect(screen).not.toContain(`${ESC}]0;PWNED`);
    expect(screen).not.toContain(`${ESC}]52;`);
    expect(screen).toContain('done');
  });

  it("svc chat: an answer's clipboard write, link and title change never reach the terminal", async () => {
    suite.fake.reply = () => ({
      content:
        `Hello ${ESC}]52;c;ZWNobyBvd25lZA==${'\u0007'}there ${ESC}]8;;https://evil.example/${ESC}\\click${ESC}]8;;${ESC}\\ ` +
        `${TITLE}${MODEL_COLOUR}pink${ESC}[0m end\u202e`,
    });
    const t = inTerminal(['chat', '--url', suite.server.url, 'hi'], {
      cwd: work,
      env: { ...home.env, NO_COLOR: '1' },
    });
    expect(await t.exit).toBe(0);
    const screen = t.screen();
    expect(screen).toMatch(/Hello\s+there\s+click\s+pink end\\u202e/);
    for (const raw of [`${ESC}]52`, `${ESC}]8;`, `${ESC}]0;`, MODEL_COLOUR, '\u202e', '\u0007'])
      expect(screen).not.toContain(raw);
  });
});
