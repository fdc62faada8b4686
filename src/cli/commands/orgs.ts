import { CliError, EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { withSpinner } from '../spinner.js';
import { inertLine, jsonText } from '../inert.js';
import { serverOrigin } from '../server.js';
import { actingOrg, signedInEntry } from '../session.js';
import { columns } from '../table.js';
import { adoptOrg, bareOrg, memberships } from './whoami.js';

// `svc orgs`: the organizations you belong to and which one this terminal acts for; `svc orgs use ORG`
// (a name or either id spelling) makes ORG the one model calls and runs act for (CONTRACT §7).

export async function orgsList(io: IO, opts: { url?: string; json?: boolean }): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  const entry = await signedInEntry(io, origin);
  const current = actingOrg(entry);
  const list = await withSpinner(io, 'Reading your organizations…', () => memberships(io, origin));
  if (!list) {
    throw new CliError(
      EXIT.auth,
      'This sign-in cannot list organizations (it was made before svc-cli asked for the account scope).',
      `Run \`svc login --url ${origin}\` again, or name one you know with \`svc orgs use ORG\`. Acting for: ${current ?? '-'}.`,
    );
  }
  if (opts.json) {
    line(io.stdout, jsonText({ current: current && `client_${bareOrg(current)}`, data: list }));
    return EXIT.ok;
  }
  const rows = list.map((m) => [
    bareOrg(m.id) === bareOrg(current) ? io.color.green('*') : ' ',
    inertLine(m.name),
    inertLine(m.role),
    inertLine(m.id),
  ]);
  for (const l of columns([
    [' ', io.color.bold('Name'), io.color.bold('Role'), io.color.bold('Id')],
    ...rows,
  ]))
    line(io.stdout, l);
  return EXIT.ok;
}

export async function orgsUse(io: IO, org: string, opts: { url?: string; json?: boolean }): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  const chosen = await adoptOrg(io, origin, org);
  if (opts.json)
    line(io.stdout, jsonText(typeof chosen === 'string' ? { org: chosen } : { org: chosen.id, ...chosen }));
  else if (typeof chosen === 'string') line(io.stdout, `Now acting for ${inertLine(chosen)}.`);
  else
    line(
      io.stdout,
      `Now acting for ${inertLine(chosen.name)} (${inertLine(chosen.id)}, ${inertLine(chosen.role)}).`,
    );
  return EXIT.ok;
}
