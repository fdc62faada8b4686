import { CliError, EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { inertLine, jsonText } from '../inert.js';
import { serverOrigin } from '../server.js';
import { signedInEntry } from '../session.js';
import { adoptOrg, memberships } from './whoami.js';

// `svc orgs`: the organizations you belong to and which one this terminal acts for; `svc orgs use ORG`
// makes ORG the one (sent as x-svc-organisation on model calls and runs, CONTRACT §7).

export async function orgsList(io: IO, opts: { url?: string; json?: boolean }): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  const entry = await signedInEntry(io, origin);
  const current = entry.default_org ?? entry.grant_org ?? entry.api_key?.org;
  const list = await memberships(io, origin);
  if (!list) {
    throw new CliError(
      EXIT.auth,
      'This sign-in cannot list organizations (it was made before svc-cli asked for the account scope).',
      `Run \`svc login --url ${origin}\` again, or name one you know with \`svc orgs use ORG\`. Acting for: ${current ?? '-'}.`,
    );
  }
  const bare = (id: string | undefined) => id?.replace(/^(client|org)_/, '');
  if (opts.json) {
    line(io.stdout, jsonText({ current, data: list }));
    return EXIT.ok;
  }
  for (const m of list) {
    const mark = bare(m.id) === bare(current) ? io.color.green('*') : ' ';
    line(io.stdout, `${mark} ${inertLine(m.id)}  ${inertLine(m.role).padEnd(6)}  ${inertLine(m.name)}`);
  }
  return EXIT.ok;
}

export async function orgsUse(io: IO, org: string, opts: { url?: string; json?: boolean }): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  await adoptOrg(io, origin, org);
  if (opts.json) line(io.stdout, jsonText({ org }));
  else line(io.stdout, `Now acting for ${org}.`);
  return EXIT.ok;
}
