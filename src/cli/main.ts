import { Command, CommanderError, Option } from 'commander';
import { readFileSync } from 'node:fs';
import { CliError, EXIT } from './errors.js';
import { line, type IO } from './io.js';
import { inert } from './inert.js';
import { logout } from './commands/logout.js';
import { whoami } from './commands/whoami.js';
import { orgsList, orgsUse } from './commands/orgs.js';
import { balance } from './commands/balance.js';
import { usage } from './commands/usage.js';
import { mcpConfig } from './commands/mcp-config.js';
import type * as RunCommand from './commands/run.js';
import { registerServiceAccounts } from './commands/service-accounts.js';
import { completion } from './commands/completion.js';
import { EXAMPLES, helpUrl } from './examples.js';

// The `svc` terminal client (docs/cli.md). Arguments are parsed by commander; each command is a small
// function over its parsed options and an IO object (STYLE, "The terminal client"). Exit codes: errors.ts.
// The commands that need a large library of their own (login's QR code and browser opener, the prompts
// of chat, run and keys, run's WebSocket client) are loaded when they run, so every other command starts
// without them.

/** package.json's version: two folders up from src/cli, three from dist/src/cli. */
function packageVersion(): string {
  for (const up of ['../../package.json', '../../../package.json']) {
    try {
      return (JSON.parse(readFileSync(new URL(up, import.meta.url), 'utf8')) as { version: string }).version;
    } catch {
      /* try the next */
    }
  }
  return 'unknown';
}
const version = packageVersion();

export function buildProgram(io: IO, done: (code: number) => void): Command {
  const program = new Command('svc')
    .description('Sign in to svc from a terminal, chat with its model, and run agents whose tools run here.')
    .version(version)
    .showHelpAfterError()
    .configureOutput({ writeOut: (s) => io.stdout.write(s), writeErr: (s) => io.stderr.write(s) })
    .exitOverride()
    .addHelpText(
      'after',
      '\nThe server is --url, else $SVC_URL, else http://localhost:8080.\n' +
        'Exit codes: 0 ok, 1 failed, 2 usage, 3 sign in needed, 4 not allowed (credits, role), ' +
        '5 server unavailable or busy, 6 server not trusted, 130 interrupted.\n' +
        `NO_COLOR=1 turns colour off.\n\nExamples:\n${EXAMPLES.svc}\n\nMore help: ${helpUrl(io.env)}`,
    );

  const url = () => new Option('--url <url>', 'the svc server (default: $SVC_URL or http://localhost:8080)');
  const json = () => new Option('--json', 'machine-readable output on stdout');
  const command = (name: string, description: string) =>
    program.command(name).description(description).addOption(url()).addOption(json());
  const act =
    <A extends unknown[]>(fn: (...args: A) => number | Promise<number>) =>
    async (...args: A) =>
      done(await fn(...args));

  command('login', 'sign in (OAuth device grant: approve the code in a browser)')
    .option('--browser', 'sign in through this machine’s browser instead (authorization code + PKCE)')
    .option(
      '--api-key',
      'get an svc_ API key for scripts and CI instead (replaces your previous key in that organization)',
    )
    .option('--org <org>', 'the organization to act for (its name, client_… or org_…)')
    .action(
      act(async (o: { url?: string; json?: boolean; browser?: boolean; apiKey?: boolean; org?: string }) =>
        (await import('./commands/login.js')).login(io, o),
      ),
    );

  command('logout', 'revoke this terminal’s grants and forget them').action(
    act((o: { url?: string; json?: boolean }) => logout(io, o)),
  );
  command('whoami', 'who you are signed in as (asked of the server): e-mail, organization and role').action(
    act((o: { url?: string; json?: boolean }) => whoami(io, o)),
  );

  const orgs = command('orgs', 'list your organizations (* marks the one you act for)').action(
    act((o: { url?: string; json?: boolean }) => orgsList(io, o)),
  );
  orgs
    .command('use')
    .description('act for ORG from now on: model calls, runs, balance and usage are that organization’s')
    .argument('<org>', 'the organization’s name (as `svc orgs` lists it), client_… or org_…')
    .addOption(url())
    .addOption(json())
    // `orgs` has the same options, so commander may hand them to it: read both levels.
    .action(
      act((org: string, _o: unknown, cmd: Command) =>
        orgsUse(io, org, cmd.optsWithGlobals<{ url?: string; json?: boolean }>()),
      ),
    );

  command('balance', 'the organization’s token balance (and your pool, if you own it)').action(
    act((o: { url?: string; json?: boolean }) => balance(io, o)),
  );
  command('usage', 'tokens the organization spent today and this month (UTC), by model').action(
    act((o: { url?: string; json?: boolean }) => usage(io, o)),
  );
  command('mcp-config', 'print the MCP client configuration for this server’s /mcp/platform')
    .addOption(
      new Option('--editor <name>', 'claude, cursor, vscode, windsurf or generic').default('generic'),
    )
    .action(act((o: { url?: string; json?: boolean; editor?: string }) => mcpConfig(io, o)));

  command('chat', 'ask the model: one question (argument or stdin) or, at a terminal, a conversation')
    .argument('[prompt...]', 'the question; read from stdin when omitted and stdin is not a terminal')
    .option('--no-stream', 'wait for the whole answer instead of streaming it')
    .option('--system <text>', 'a system message to start with')
    .action(
      act(async (words: string[], o: { url?: string; json?: boolean; stream?: boolean; system?: string }) =>
        (await import('./commands/chat.js')).chat(io, words.length ? words.join(' ') : undefined, o),
      ),
    );

  command('run', 'run an agent: the model plans, this terminal runs its tools in the working directory')
    .argument('[task...]', 'what the agent should do')
    .option('--agent <name>', 'the agent (GET /v1/agents)', 'default')
    .option('-y, --yes', 'run writes and commands without asking')
    .option('--allow <kind>', '"read": run reads without asking and refuse writes and commands (no prompts)')
    .option('--command-timeout <seconds>', 'longest a command may run', '60')
    .option('--output-cap <bytes>', 'most output a command may return', String(64 * 1024))
    .action(
      act(async (words: string[], o: Parameters<typeof RunCommand.run>[2]) =>
        (await import('./commands/run.js')).run(io, words.join(' '), o),
      ),
    );
  const email = () =>
    new Option('--email <address>', 'your e-mail address (asked at the terminal when omitted)');
  const keys = command(
    'keys',
    'your API keys: name, organization, prefix, created, last used, expiry, scopes (asks for your password)',
  )
    .addOption(email())
    .option('--all', 'revoked and expired keys too')
    .action(
      act(async (o: { url?: string; json?: boolean; email?: string; all?: boolean }) =>
        (await import('./commands/keys.js')).keysList(io, o),
      ),
    );
  keys
    .command('revoke')
    .description('revoke one of your API keys at once (asks for your password)')
    .argument('<id>', 'the key’s ID, as `svc keys` lists it')
    .addOption(url())
    .addOption(json())
    .addOption(email())
    // `keys` has the same options, so commander may hand them to it: read both levels.
    .action(
      act(async (id: string, _o: unknown, cmd: Command) =>
        (await import('./commands/keys.js')).keysRevoke(
          io,
          id,
          cmd.optsWithGlobals<{ url?: string; json?: boolean; email?: string }>(),
        ),
      ),
    );
  registerServiceAccounts(program, io, act);
  program
    .command('completion')
    .description('print a completion script for bash, zsh or fish')
    .argument('<shell>', 'bash, zsh or fish')
    .action(act((shell: string) => completion(io, program, shell)));

  for (const c of program.commands) {
    const examples = EXAMPLES[c.name()];
    if (examples) c.addHelpText('after', `\nExamples:\n${examples}\n\nMore help: ${helpUrl(io.env)}`);
  }

  return program;
}

/** Runs one command line; answers the exit code. Errors go to stderr with their next step. */
export async function main(argv: string[], io: IO): Promise<number> {
  let code: number = EXIT.ok;
  const program = buildProgram(io, (c) => (code = c));
  try {
    await program.parseAsync(argv, { from: 'user' });
    return code;
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version "fail" with exit code 0; bad arguments are usage errors.
      return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    if (io.signal.aborted) return EXIT.interrupted;
    if (err instanceof CliError) {
      // Messages carry text from the server (an error's message, a name): printed inert.
      line(io.stderr, `${io.color.red('Error:')} ${inert(err.message)}`);
      if (err.nextStep) line(io.stderr, inert(err.nextStep));
      return err.exitCode;
    }
    line(io.stderr, `${io.color.red('Error:')} ${inert((err as Error).message ?? String(err))}`);
    return EXIT.failure;
  }
}
