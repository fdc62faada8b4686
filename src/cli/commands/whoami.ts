import { readEntry, updateEntry } from '../credentials.js';
import { CliError, EXIT, notSignedIn } from '../errors.js';
import { line, type IO } from '../io.js';
import { jsonText } from '../inert.js';
import { serverOrigin } from '../server.js';
import { accountCredential, callWithCredential, modelCredential } from '../api.js';
import { signedInEntry } from '../session.js';

// `svc whoami`: who this terminal is signed in as on a server, for which organization, and until when.

export interface Membership {
  id: string;
  name: string;
  role: string;
}

export interface Summary {
  server: string;
  user: string | undefined;
  email: string | undefined;
  /** The organization model calls and runs act for. */
  org: string | undefined;
  role: string | undefined;
  grants: { model?: { expires_at: string }; platform?: { expires_at: string } };
  api_key: { org: string; email: string } | undefined;
}

const sameOrg = (a: string | undefined, b: string | undefined) =>
  Boolean(a && b) && a!.replace(/^(client|org)_/, '') === b!.replace(/^(client|org)_/, '');

/** The memberships with roles, from GET /v1/clients — it takes an svc_ key (S|B), not an OAuth grant. */
export async function memberships(io: IO, origin: string): Promise<Membership[] | undefined> {
  const credential = await accountCredential(io, origin);
  if (!credential) return undefined;
  const res = await callWithCredential(io, origin, '/v1/clients?limit=100', { method: 'GET' }, credential);
  return ((await res.json()) as { data: Membership[] }).data;
}

export async function describeEntry(io: IO, origin: string): Promise<Summary> {
  const entry = await signedInEntry(io, origin);
  const org = entry.default_org ?? entry.grant_org ?? entry.api_key?.org;
  const orgs = await memberships(io, origin);
  const iso = (s: number) => new Date(s * 1000).toISOString();
  const grants: Summary['grants'] = {};
  if (entry.grants?.model) grants.model = { expires_at: iso(entry.grants.model.expires_at) };
  if (entry.grants?.platform) grants.platform = { expires_at: iso(entry.grants.platform.expires_at) };
  return {
    server: origin,
    user: entry.user,
    email: entry.api_key?.email,
    org,
    role: orgs?.find((m) => sameOrg(m.id, org))?.role,
    grants,
    api_key: entry.api_key ? { org: entry.api_key.org, email: entry.api_key.email } : undefined,
  };
}

/**
 * Makes `org` the organization model calls and runs act for (x-svc-organisation). Checked with the server
 * first: a grant asks GET /v1/models as that organization (403 when not a live member); an svc_ key is
 * bound to one organization and can act for no other.
 */
export async function adoptOrg(io: IO, origin: string, org: string): Promise<void> {
  const entry = await signedInEntry(io, origin);
  if (!entry.grants?.model) {
    if (entry.api_key && sameOrg(entry.api_key.org, org)) return;
    throw new CliError(
      EXIT.denied,
      `Your API key is bound to ${entry.api_key?.org}; it cannot act for ${org}.`,
      'Sign in with `svc login` (OAuth acts in every organization you belong to).',
    );
  }
  const credential = { ...(await modelCredential(io, origin)), org };
  await callWithCredential(io, origin, '/v1/models', { method: 'GET' }, credential);
  await updateEntry(io.env, origin, (old) => ({ ...old, default_org: org }));
}

export async function whoami(io: IO, opts: { url?: string; json?: boolean }): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  if (!(await readEntry(io.env, origin))) throw notSignedIn(origin);
  const s = await describeEntry(io, origin);
  if (opts.json) {
    line(io.stdout, jsonText(s));
    return EXIT.ok;
  }
  const c = io.color;
  line(io.stdout, `${c.bold('Server')}        ${s.server}`);
  if (s.user) line(io.stdout, `${c.bold('User')}          ${s.user}${s.email ? ` (${s.email})` : ''}`);
  else if (s.email) line(io.stdout, `${c.bold('User')}          ${s.email}`);
  line(io.stdout, `${c.bold('Organization')}  ${s.org ?? '-'}${s.role ? ` (${s.role})` : ''}`);
  for (const [kind, g] of Object.entries(s.grants)) {
    line(
      io.stdout,
      `${c.bold(`${kind[0]!.toUpperCase()}${kind.slice(1)} grant`.padEnd(14))}access token until ${g.expires_at}, refreshed as needed`,
    );
  }
  if (s.api_key) line(io.stdout, `${c.bold('API key')}       for ${s.api_key.org}`);
  return EXIT.ok;
}
