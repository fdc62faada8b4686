import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { expect } from 'vitest';
import { PageClient, csrfOf } from './page-client.js';
import { driveConsent } from './oauth.js';
import type { TestUser } from './fixtures.js';
import { parseAs } from './json.js';
import { nodeEntry } from './entry.js';
import { eventually } from './eventually.js';
import type { ServerEntry } from '../../src/cli/credentials.js';
import type { Summary } from '../../src/cli/commands/whoami.js';
import type { Outcome } from '../../src/cli/outcome.js';
import type { ChatCompletion } from 'openai/resources/chat/completions';
import type { ClientBalance, OwnerBalance } from './answers.js';

// The `svc` terminal client as a real child process (src/cli/cli.ts: compiled in dist/ as bin/svc.mjs runs
// it when the build is current, else through tsx: entry.ts), with its own config folder, so
// credentials.json is the real file a person would have.

/** The node arguments that start the CLI (before its own arguments). */
export const CLI_NODE_ARGS = nodeEntry('src/cli/cli.ts');

export interface CliRun {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the first match of `pattern` in stderr (or stdout), as soon as it appears. */
  waitFor(pattern: RegExp, stream?: 'stdout' | 'stderr'): Promise<RegExpMatchArray>;
  exit: Promise<number>;
}

/** credentials.json as the CLI writes it (src/cli/credentials.ts). */
export interface CredentialsFile {
  version: number;
  servers: Record<string, ServerEntry>;
}

/** `svc whoami --json` (src/cli/commands/whoami.ts). */
export type WhoAmI = Summary;

/** `svc chat --json`: the completion with the verified outcome (src/cli/commands/chat.ts). */
export type CliChat = ChatCompletion & { svc_outcome: Outcome };

/** `svc balance --json` (src/cli/commands/balance.ts). */
export interface CliBalance {
  org: string;
  role?: string;
  balance: ClientBalance;
  owner?: OwnerBalance;
}

export interface CliHome {
  dir: string;
  env: Record<string, string>;
  credentials(): Promise<CredentialsFile>;
  writeCredentials(value: unknown): Promise<void>;
  cleanup(): Promise<void>;
}

export async function cliHome(): Promise<CliHome> {
  const dir = await mkdtemp(join(tmpdir(), 'svc-cli-'));
  const file = join(dir, 'config', 'svc', 'credentials.json');
  return {
    dir,
    env: { XDG_CONFIG_HOME: join(dir, 'config'), HOME: dir },
    credentials: async () => parseAs<CredentialsFile>(await readFile(file, 'utf8')),
    async writeCredentials(value) {
      await mkdir(dirname(file), { recursive: true, mode: 0o700 });
      await writeFile(file, JSON.stringify(value), { mode: 0o600 });
    },
    cleanup: () => rm(dir, { recursive: true, force: true }),
  };
}

export function startCli(
  args: string[],
  opts: { env?: Record<string, string>; cwd?: string; input?: string } = {},
): CliRun {
  const env: Record<string, string> = { PATH: process.env.PATH ?? '', NO_COLOR: '1', ...opts.env };
  const child = spawn(process.execPath, [...CLI_NODE_ARGS, ...args], {
    env,
    cwd: opts.cwd ?? process.cwd(),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const out = { stdout: '', stderr: '' };
  const waiters: { pattern: RegExp; stream: 'stdout' | 'stderr'; resolve(m: RegExpMatchArray): void }[] = [];
  const check = () => {
    for (const w of [...waiters]) {
      const m = out[w.stream].match(w.pattern);
      if (m) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(m);
      }
    }
  };
  child.stdout.on('data', (b: Buffer) => ((out.stdout += b.toString()), check()));
  child.stderr.on('data', (b: Buffer) => ((out.stderr += b.toString()), check()));
  if (opts.input !== undefined) child.stdin.end(opts.input);
  const exit = new Promise<number>((resolve) =>
    child.on('close', (code, signal) => resolve(code ?? (signal ? 128 : -1))),
  );
  return {
    child,
    stdout: () => out.stdout,
    stderr: () => out.stderr,
    waitFor: (pattern, stream = 'stderr') =>
      new Promise((resolve, reject) => {
        waiters.push({ pattern, stream, resolve });
        check();
        void exit.then(() =>
          reject(
            new Error(`svc exited before ${pattern} appeared\nstdout: ${out.stdout}\nstderr: ${out.stderr}`),
          ),
        );
      }),
    exit,
  };
}

/** Runs the CLI to its end: exit code and output. */
export async function runCli(args: string[], opts: Parameters<typeof startCli>[1] = {}) {
  const run = startCli(args, opts);
  const code = await run.exit;
  return { code, stdout: run.stdout(), stderr: run.stderr() };
}

/** The person approves the user code on the device page, signed in with their session cookie. */
export async function approveOnDevicePage(
  v2Url: string,
  user: TestUser,
  userCode: string,
  decision = 'approve',
) {
  const browser = new PageClient(v2Url);
  browser.jar.set('__Host-svc_session', user.session);
  const page = await browser.get(`/account/device?user_code=${encodeURIComponent(userCode)}`);
  expect(page.status).toBe(200);
  const res = await browser.post('/account/device', {
    csrf_token: csrfOf(page.text),
    user_code: userCode,
    client_id: user.orgId,
    decision,
  });
  expect(res.status).toBe(303);
}

/** Signs the CLI in with --browser: the test plays the browser, following the printed URL with a session. */
export async function browserLogin(
  url: string,
  env: Record<string, string>,
  user: TestUser,
  extra: string[] = [],
) {
  const login = startCli(['login', '--browser', '--url', url, ...extra], { env });
  const [, authorizeUrl] = await login.waitFor(/To sign in, open:\n(\S+)\n[\s\S]*Waiting for the browser/);
  const consent = await driveConsent(authorizeUrl!, user.session, { org: user.orgId });
  expect(consent.postStatus).toBe(303);
  const redirect = new URL(consent.location!);
  expect(redirect.origin).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  // The browser follows the redirect to the CLI's loopback listener.
  const landed = await fetch(redirect);
  expect(landed.status).toBe(200);
  expect(await landed.text()).toContain('Signed in');
  expect(await login.exit).toBe(0);
  return login;
}

/**
 * Each CLI process starts node and tsx: 1–2 s on a quiet machine, several seconds on a busy one (CI runs
 * every file at once). A test spawning a few of them gets this much time.
 */
export const CLI_TEST_TIMEOUT_MS = 120_000;

const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

export interface TerminalRun {
  /** Every byte the terminal was sent, as text (escape sequences included). */
  screen(): string;
  /** Keys typed at the terminal. */
  type(keys: string): void;
  /** Resolves once `pattern` is on the screen; fails after `ms`. */
  waitFor(pattern: RegExp, ms?: number): Promise<void>;
  exit: Promise<number>;
}

/**
 * `svc ARGS` inside a real pseudo-terminal (util-linux `script`): stdin, stdout and stderr are a TTY, as
 * for a person. What the terminal was sent is read raw, so a test can assert bytes.
 */
export function inTerminal(args: string[], opts: { cwd: string; env?: Record<string, string> }): TerminalRun {
  const command = [process.execPath, ...CLI_NODE_ARGS, ...args].map(shellQuote).join(' ');
  const child = spawn('script', ['-qfec', command, '/dev/null'], {
    cwd: opts.cwd,
    env: {
      PATH: process.env.PATH ?? '',
      TERM: 'xterm-256color',
      COLUMNS: '100',
      LINES: '40',
      ...opts.env,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let screen = '';
  child.stdout.on('data', (b: Buffer) => (screen += b.toString()));
  const exit = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)));
  return {
    screen: () => screen,
    type: (keys: string) => void child.stdin.write(keys),
    async waitFor(pattern: RegExp, ms = 20_000) {
      await eventually(() => pattern.test(screen), ms, 'the pattern', 50).catch(() => {
        throw new Error(`not on the terminal within ${ms} ms: ${pattern}\n${screen}`);
      });
    },
    exit,
  };
}
