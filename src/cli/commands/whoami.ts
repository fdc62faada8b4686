import { readEntry, updateEntry, type ServerEntry } from '../credentials.js';
import { CliError, EXIT, notSignedIn } from '../errors.js';
import { line, type IO } from '../io.js';
import { withSpinner } from '../spinner.js';
import { inertLine, jsonText } from '../inert.js';
import { serverOrigin } from '../server.js';
import { accountCredential, callWithCredential, modelCredential, type Credential } from '../api.js';
import { actingOrg, signedInEntry } from '../session.js';
import { columns } from '../table.js';

// `svc whoami`: who this terminal is signed in as, asked of the server (GET /v1/auth/verify, CONTRACT §6;
// a grant with scope `account` reads it too, §7), like `gh auth status`: a revoked sign-in is reported as
// revoked, never by the expiry stored here.

export interface Membership {
  id: string;
  name: string;
  role: string;
}

export interface Summary {
  server: string;
  /** `active`, or `revoked`: the server no longer accepts this terminal's sign-in. */
  status: 'active' | 'revoked';
  user: string | undefined;
  email: string | undefined;
  /** The organization model calls and runs act for (client_…). */
  org: string | undefined;
  org_name: string | undefined;
  role: string | undefined;
  /** How this terminal is signed in: the OAuth grants of `svc login`, or an API key. */
  credential: 'oauth' | 'api_key';
  grants: { model?: { expires_at: string }; platform?: { expires_at: string } };
  api_key: { org: string; email: string; name?: string; last_used_at?: number | null } | undefined;
}

/** The bare part of an organization id: client_x and org_x are one organization (CONTRACT §2). */
export const bareOrg = (id: string | undefined) => id?.replace(/^(client|org)_/, '');
const sameOrg = (a: string | undefined, b: string | undefined) =>
  Boolean(a && b) && bareOrg(a) === bareOrg(b);

/** The memberships with roles, from GET /v1/clients (the account scope or an svc_ key). */
export async function memberships(io: IO, origin: string): Promise<Membership[] | undefined> {
  const credential = await accountCredential(io, origin);
  if (!credential) return undefined;
  const res = await callWithCredential(io, origin, '/v1/clients?limit=100', { method: 'GET' }, credential);
  return ((await res.json()) as { data: Membership[] }).data;
}

interface Verified {
  client_id: string;
  user_id: string | null;
  email: string | null;
  token_name: string | null;
  last_used_at: number | null;
  role?: string;
}

async function verify(io: IO, origin: string, credential: Credential): Promise<Verified> {
  const res = await callWithCredential(io, origin, '/v1/auth/verify', { method: 'GET' }, credential);
  return (await res.json()) as Verified;
}

/** What this machine's credentials file says, before the server is asked. */
export async function storedSummary(io: IO, origin: string): Promise<Summary> {
  const entry = await signedInEntry(io, origin);
  const iso = (s: number) => new Date(s * 1000).toISOString();
  const grants: Summary['grants'] = {};
  if (entry.grants?.model) grants.model = { expires_at: iso(entry.grants.model.expires_at) };
  if (entry.grants?.platform) grants.platform = { expires_at: iso(entry.grants.platform.expires_at) };
  return {
    server: origin,
    status: 'active',
    user: entry.user,
    email: entry.api_key?.email,
    org: clientIdOf(actingOrg(entry)),
    org_name: undefined,
    role: undefined,
    credential: entry.grants?.model ? 'oauth' : 'api_key',
    grants,
    api_key: entry.api_key ? { org: entry.api_key.org, email: entry.api_key.email } : undefined,
  };
}

/** Asks the server who this terminal is; `revoked` when it no longer accepts the sign-in. */
export async function describeEntry(io: IO, origin: string): Promise<Summary> {
  const entry = await signedInEntry(io, origin);
  const summary = await storedSummary(io, origin);
  const credential = await accountCredential(io, origin).catch(revokedAs(undefined));
  if (!credential) return { ...summary, status: entry.grants?.model || entry.api_key ? 'revoked' : 'active' };
  const who = await verify(io, origin, credential).catch(revokedAs(undefined));
  if (!who) return { ...summary, status: 'revoked' };
  summary.user = who.user_id ?? summary.user;
  summary.email = who.email ?? summary.email;
  if (credential.kind === 'api_key' && summary.api_key) {
    summary.api_key = {
      ...summary.api_key,
      name: who.token_name ?? undefined,
      last_used_at: who.last_used_at,
    };
  }
  const orgs = await memberships(io, origin);
  const acting = orgs?.find((m) => sameOrg(m.id, summary.org));
  summary.org_name = acting?.name;
  summary.role = acting?.role ?? (sameOrg(who.client_id, summary.org) ? who.role : undefined);
  return summary;
}

/** A sign-in the server refused (exit 3, "sign in again") answers `fallback`; anything else is thrown. */
const revokedAs =
  <T>(fallback: T) =>
  (err: unknown): T => {
    if (err instanceof CliError && err.exitCode === EXIT.auth) return fallback;
    throw err;
  };

const clientIdOf = (id: string | undefined) => (id ? `client_${bareOrg(id)}` : undefined);

/**
 * The organization `wanted` names — its name (as `svc orgs` lists it, any case) or either id spelling —
 * among the person's memberships. Without a way to list them (an old sign-in), an id is taken as given.
 */
export function findOrg(list: Membership[] | undefined, wanted: string): Membership | string {
  if (!list) {
    if (/^(client|org)_/.test(wanted)) return `client_${bareOrg(wanted)}`;
    throw new CliError(
      EXIT.usage,
      `"${inertLine(wanted)}" is not an organization id.`,
      'Name it as client_… or org_….',
    );
  }
  const byId = list.find((m) => sameOrg(m.id, wanted));
  if (byId) return byId;
  const byName = list.filter((m) => m.name.toLowerCase() === wanted.trim().toLowerCase());
  if (byName.length === 1) return byName[0]!;
  throw new CliError(
    EXIT.denied,
    byName.length
      ? `${byName.length} of your organizations are named "${inertLine(wanted)}".`
      : `You are not a member of an organization "${inertLine(wanted)}".`,
    byName.length
      ? `Name one by its id: ${byName.map((m) => inertLine(m.id)).join(', ')}.`
      : 'See yours with `svc orgs`, then `svc orgs use ORG`.',
  );
}

/**
 * Makes `org` (a name or either id spelling) the organization model calls and runs act for. Checked with
 * the server first: a grant asks GET /v1/models as that organization (403 when not a live member); an
 * svc_ key is bound to one organization and can act for no other. Answers the organization chosen.
 */
export async function adoptOrg(io: IO, origin: string, org: string): Promise<Membership | string> {
  const entry = await signedInEntry(io, origin);
  const found = findOrg(await memberships(io, origin), org);
  const id = typeof found === 'string' ? found : found.id;
  if (!entry.grants?.model) {
    if (entry.api_key && sameOrg(entry.api_key.org, id)) return found;
    throw new CliError(
      EXIT.denied,
      `Your API key is bound to ${entry.api_key?.org}; it cannot act for ${inertLine(org)}.`,
      'Sign in with `svc login` (OAuth acts in every organization you belong to).',
    );
  }
  const credential = { ...(await modelCredential(io, origin)), org: id };
  await callWithCredential(io, origin, '/v1/models', { method: 'GET' }, credential);
  await updateEntry(io.env, origin, (old) => ({ ...old, default_org: id }));
  return found;
}

/** "Acme Research (client_…)" or the id alone. */
export const orgLabel = (s: { org?: string; org_name?: string }) =>
  s.org_name ? `${inertLine(s.org_name)} (${s.org})` : (s.org ?? '-');

function credentialLines(entry: ServerEntry, s: Summary): [string, string][] {
  const rows: [string, string][] = [];
  if (s.status === 'revoked') return [['Sign-in', 'revoked or ended: the server no longer accepts it']];
  if (entry.grants?.model) rows.push(['Sign-in', 'OAuth (svc login), refreshed as needed']);
  if (s.api_key) {
    const used = s.api_key.last_used_at
      ? `, last used ${new Date(s.api_key.last_used_at * 1000).toISOString()}`
      : '';
    const name = s.api_key.name ? `"${inertLine(s.api_key.name)}" ` : '';
    rows.push(['API key', `${name}for ${s.api_key.org}${used}`]);
  }
  return rows;
}

export async function whoami(io: IO, opts: { url?: string; json?: boolean }): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  const entry = await readEntry(io.env, origin);
  if (!entry || (!entry.grants && !entry.api_key)) throw notSignedIn(origin);
  const s = await withSpinner(io, 'Asking the server…', () => describeEntry(io, origin));
  const code = s.status === 'revoked' ? EXIT.auth : EXIT.ok;
  if (opts.json) {
    line(io.stdout, jsonText(s));
    return code;
  }
  const rows: [string, string][] = [['Server', s.server]];
  if (s.email) rows.push(['E-mail', inertLine(s.email)]);
  if (s.user) rows.push(['User', inertLine(s.user)]);
  rows.push(['Organization', orgLabel(s)]);
  if (s.role) rows.push(['Role', inertLine(s.role)]);
  rows.push(...credentialLines(entry, s));
  for (const l of columns(rows.map(([k, v]) => [io.color.bold(k), v]))) line(io.stdout, l);
  if (s.status === 'revoked') line(io.stderr, `Run \`svc login --url ${origin}\` to sign in again.`);
  return code;
}
