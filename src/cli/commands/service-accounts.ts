import { Command, Option } from 'commander';
import { apiKey, callWithCredential } from '../api.js';
import { CliError, EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { inertLine, jsonText } from '../inert.js';
import { serverOrigin } from '../server.js';
import { signedInEntry } from '../session.js';

// `svc service-accounts create|list|mint|delete`: an organization's non-person principals for scripts
// and CI (CONTRACT §11). Owner only; the account routes take the owner's `svc_` key (`svc login
// --api-key`), never an OAuth grant (writes take no grant: CONTRACT §7). A minted secret is printed once.

interface Options {
  url?: string;
  json?: boolean;
  org?: string;
}

interface Credential {
  token_id: number;
  token_prefix: string;
  expires_at: number | null;
  scopes: string[];
  last_used_at: number | null;
}

interface ServiceAccount {
  id: string;
  name: string;
  role: string;
  created_at: number;
  credential?: Credential | null;
}

async function call<T>(io: IO, opts: Options, method: string, path: string, body?: unknown) {
  const origin = serverOrigin(opts.url, io.env);
  const entry = await signedInEntry(io, origin);
  const key = await apiKey(io, origin);
  if (!key) {
    throw new CliError(
      EXIT.auth,
      'Managing service accounts needs an API key: the account routes do not take OAuth grants.',
      'Run `svc login --api-key` as the organization’s owner.',
    );
  }
  const org = opts.org ?? entry.api_key?.org;
  const res = await callWithCredential(
    io,
    origin,
    `/v1/clients/${encodeURIComponent(org!)}/service-accounts${path}`,
    {
      method,
      ...(body === undefined
        ? {}
        : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
    },
    { kind: 'api_key', token: key },
  );
  return (await res.json()) as T;
}

const when = (unix: number | null | undefined) => (unix ? new Date(unix * 1000).toISOString() : '-');

function usage(message: string): never {
  throw new CliError(EXIT.usage, message, 'See `svc service-accounts --help`.');
}

export async function serviceAccountsCreate(
  io: IO,
  name: string,
  opts: Options & { role?: string },
): Promise<number> {
  const sa = await call<ServiceAccount>(io, opts, 'POST', '', { name, role: opts.role ?? 'member' });
  if (opts.json) line(io.stdout, jsonText(sa));
  else line(io.stdout, `Created ${inertLine(sa.id)} (${inertLine(sa.name)}, ${inertLine(sa.role)}).`);
  return EXIT.ok;
}

export async function serviceAccountsList(io: IO, opts: Options): Promise<number> {
  const { data } = await call<{ data: ServiceAccount[] }>(io, opts, 'GET', '');
  if (opts.json) {
    line(io.stdout, jsonText({ data }));
    return EXIT.ok;
  }
  if (!data.length) line(io.stdout, 'No service accounts.');
  for (const sa of data) {
    const c = sa.credential;
    const key = c
      ? `key ${inertLine(c.token_prefix)}… scopes ${c.scopes.join(',')} expires ${when(c.expires_at)} last used ${when(c.last_used_at)}`
      : 'no key';
    line(io.stdout, `${inertLine(sa.id)}  ${inertLine(sa.role).padEnd(6)}  ${inertLine(sa.name)}  ${key}`);
  }
  return EXIT.ok;
}

export async function serviceAccountsMint(
  io: IO,
  id: string,
  opts: Options & { name?: string; scopes?: string; expiresInDays?: string },
): Promise<number> {
  const body: Record<string, unknown> = {};
  if (opts.name) body.token_name = opts.name;
  if (opts.scopes) body.scopes = opts.scopes.split(',').map((s) => s.trim());
  if (opts.expiresInDays !== undefined) {
    const days = Number(opts.expiresInDays);
    if (!Number.isInteger(days) || days < 1 || days > 400) usage('--expires-in-days must be 1 to 400.');
    body.expires_at = Math.floor(Date.now() / 1000) + days * 86_400;
  }
  const minted = await call<{ id: number; token: string; expires_at: number | null; scopes: string[] }>(
    io,
    opts,
    'POST',
    `/${encodeURIComponent(id)}/tokens`,
    body,
  );
  if (opts.json) {
    line(io.stdout, jsonText(minted));
    return EXIT.ok;
  }
  // The secret is shown this once: the server keeps only its hash.
  line(io.stdout, minted.token);
  io.stderr.write(
    `Key ${minted.id} for ${inertLine(id)} (scopes ${minted.scopes.join(',')}, expires ${when(minted.expires_at)}). ` +
      'Store it now: it is not shown again. The previous key of this service account is revoked.\n',
  );
  return EXIT.ok;
}

export async function serviceAccountsDelete(io: IO, id: string, opts: Options): Promise<number> {
  const out = await call<{ deleted: boolean }>(io, opts, 'DELETE', `/${encodeURIComponent(id)}`);
  if (opts.json) line(io.stdout, jsonText(out));
  else line(io.stdout, `Deleted ${inertLine(id)}; its key no longer works.`);
  return EXIT.ok;
}

/** Registers the command group on the program (src/cli/main.ts). */
export function registerServiceAccounts(
  program: Command,
  io: IO,
  act: <A extends unknown[]>(fn: (...args: A) => number | Promise<number>) => (...args: A) => Promise<void>,
): void {
  const sub = (group: Command, name: string, description: string) =>
    group
      .command(name)
      .description(description)
      .addOption(new Option('--url <url>', 'the svc server (default: $SVC_URL or http://localhost:8080)'))
      .addOption(new Option('--json', 'machine-readable output on stdout'))
      .addOption(new Option('--org <org>', 'the organization (default: your API key’s)'));
  type All = Options & { role?: string; name?: string; scopes?: string; expiresInDays?: string };
  const opts = (cmd: Command) => cmd.optsWithGlobals<All>();
  const group = program
    .command('service-accounts')
    .description('the organization’s service accounts: principals for scripts and CI (owner)');
  sub(group, 'create', 'create a service account')
    .argument('<name>')
    .addOption(
      new Option('--role <role>', 'member or viewer').choices(['member', 'viewer']).default('member'),
    )
    .action(act((name: string, _o: unknown, cmd: Command) => serviceAccountsCreate(io, name, opts(cmd))));
  sub(group, 'list', 'list service accounts with their key (prefix, scopes, expiry, last use)').action(
    act((_o: unknown, cmd: Command) => serviceAccountsList(io, opts(cmd))),
  );
  sub(group, 'mint', 'mint the service account’s key (replaces its previous one); the secret is printed once')
    .argument('<sa_id>')
    .option('--name <name>', 'the key’s name')
    .option('--scopes <list>', 'model, account or model,account (default both)')
    .option('--expires-in-days <days>', 'the key expires after this many days (1–400)')
    .action(act((id: string, _o: unknown, cmd: Command) => serviceAccountsMint(io, id, opts(cmd))));
  sub(group, 'delete', 'delete a service account; its key stops working at once')
    .argument('<sa_id>')
    .action(act((id: string, _o: unknown, cmd: Command) => serviceAccountsDelete(io, id, opts(cmd))));
}
