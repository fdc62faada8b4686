import { CliError, EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { inertLine, jsonText } from '../inert.js';
import { reach, serverOrigin } from '../server.js';
import { errorFor } from '../api.js';
import { columns, utcMinute } from '../table.js';
import { readEntry, updateEntry } from '../credentials.js';
import { withPasswordSession, type PasswordSession } from '../password-session.js';

// `svc keys` and `svc keys revoke ID`: the person's own svc_ credentials (GET /v1/tokens, POST
// /v1/tokens/revoke: CONTRACT §6). Those routes take a session only, so each command signs in at the
// terminal for itself and signs out after (src/cli/password-session.ts; docs/decisions/0060). A key's
// secret is never shown again after its mint: the list names it by name and prefix.

interface KeysOptions {
  url?: string;
  json?: boolean;
  email?: string;
  all?: boolean;
}

/** GET /v1/tokens items (CONTRACT §6). */
export interface KeyItem {
  id: number;
  client_id: string;
  token_name: string;
  token_prefix: string;
  created_at: number;
  last_used_at: number | null;
  revoked_at: number | null;
  expires_at: number | null;
  scopes: string[];
}

/** The list's page size: the most a page may hold (CONTRACT §3). */
const PAGE = 100;
/** Pages read at most: 5,000 keys is far beyond one person's. */
const MAX_PAGES = 50;

async function get<T>(io: IO, s: PasswordSession, path: string): Promise<T> {
  const res = await reach(s.origin, () =>
    fetch(`${s.origin}${path}`, { headers: { authorization: `Bearer ${s.token}` }, signal: io.signal }),
  );
  const body = await res.json().catch((): unknown => ({}));
  if (!res.ok) throw errorFor(s.origin, res.status, body, res.headers.get('retry-after'));
  return body as T;
}

/** Every key of the person (active first, then revoked, newest first: the server's order). */
async function allKeys(io: IO, s: PasswordSession, withEnded: boolean): Promise<KeyItem[]> {
  const keys: KeyItem[] = [];
  for (let page = 0; page < MAX_PAGES; page++) {
    const after = keys.length ? `&starting_after=${keys.at(-1)!.id}` : '';
    const { data } = await get<{ data: KeyItem[] }>(io, s, `/v1/tokens?limit=${PAGE}${after}`);
    keys.push(...data);
    // Active keys come first: once a revoked one shows, the rest are revoked too.
    if (data.length < PAGE || (!withEnded && data.at(-1)!.revoked_at !== null)) break;
  }
  return keys;
}

/** Organization names by the bare part of their id (the list spells ids org_…, clients client_…). */
async function orgNames(io: IO, s: PasswordSession): Promise<Map<string, string>> {
  const { data } = await get<{ data: { id: string; name: string }[] }>(io, s, '/v1/clients?limit=100');
  return new Map(data.map((c) => [bare(c.id), c.name]));
}

const bare = (id: string) => id.replace(/^(client|org)_/, '');
const nowSeconds = () => Math.floor(Date.now() / 1000);
const isActive = (k: KeyItem) =>
  k.revoked_at === null && (k.expires_at === null || k.expires_at > nowSeconds());

function status(k: KeyItem): string {
  if (k.revoked_at !== null) return `revoked ${utcMinute(k.revoked_at)}`;
  if (k.expires_at === null) return 'never expires';
  return `${k.expires_at > nowSeconds() ? 'expires' : 'expired'} ${utcMinute(k.expires_at)}`;
}

/** `svc keys`: the person's active keys (`--all`: revoked and expired ones too). */
export async function keysList(io: IO, opts: KeysOptions): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  const { keys, names } = await withPasswordSession(io, origin, opts.email, async (s) => {
    const [keys, names] = await Promise.all([allKeys(io, s, Boolean(opts.all)), orgNames(io, s)]);
    return { keys, names };
  });
  const shown = opts.all ? keys : keys.filter(isActive);
  if (opts.json) {
    const data = shown.map((k) => ({ ...k, org_name: names.get(bare(k.client_id)) ?? null }));
    line(io.stdout, jsonText({ data }));
    return EXIT.ok;
  }
  if (!shown.length) {
    line(io.stdout, opts.all ? 'You have no API keys.' : 'You have no active API keys.');
    line(io.stdout, 'Create one for scripts and CI with `svc login --api-key`.');
    return EXIT.ok;
  }
  const c = io.color;
  const heading = ['ID', 'Name', 'Organization', 'Prefix', 'Created', 'Last used', 'Expiry', 'Scopes'];
  const rows = shown.map((k) => [
    String(k.id),
    inertLine(k.token_name),
    inertLine(names.get(bare(k.client_id)) ?? k.client_id),
    `${inertLine(k.token_prefix)}…`,
    utcMinute(k.created_at),
    k.last_used_at === null ? 'never' : utcMinute(k.last_used_at),
    status(k),
    inertLine(k.scopes.join(' ')),
  ]);
  for (const l of columns([heading.map((h) => c.bold(h)), ...rows], ['right'])) line(io.stdout, l);
  return EXIT.ok;
}

/** `svc keys revoke ID`: ends one of the person's keys at once; scripts using it get 401 from then on. */
export async function keysRevoke(io: IO, id: string, opts: KeysOptions): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  const n = Number(id);
  if (!/^\d{1,10}$/.test(id) || n < 1 || n > 2_147_483_647) {
    throw new CliError(EXIT.usage, `"${inertLine(id)}" is not a key id.`, 'See the ID column of `svc keys`.');
  }
  const revoked = await withPasswordSession(io, origin, opts.email, async (s) => {
    const keys = await allKeys(io, s, true);
    const key = keys.find((k) => k.id === n);
    if (!key) {
      throw new CliError(EXIT.usage, `You have no key ${n} on ${origin}.`, '`svc keys` lists yours.');
    }
    const res = await reach(origin, () =>
      fetch(`${origin}/v1/tokens/revoke`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${s.token}` },
        body: JSON.stringify({ id: n }),
        signal: io.signal,
      }),
    );
    const body = (await res.json().catch(() => ({}))) as { revoked_at?: number };
    if (!res.ok) throw errorFor(origin, res.status, body, res.headers.get('retry-after'));
    return { ...key, revoked_at: body.revoked_at ?? nowSeconds(), already: key.revoked_at !== null };
  });
  // The key this terminal holds for the server, if it was that one, is no use any more: forget it.
  const held = (await readEntry(io.env, origin))?.api_key;
  const heldHere = Boolean(
    held && held.token.startsWith(revoked.token_prefix) && bare(held.org) === bare(revoked.client_id),
  );
  if (heldHere) await updateEntry(io.env, origin, (old) => (old ? { ...old, api_key: undefined } : old));
  const { already, ...item } = revoked;
  if (opts.json) {
    line(io.stdout, jsonText({ ...item, already_revoked: already, forgotten_here: heldHere }));
    return EXIT.ok;
  }
  if (already) {
    line(
      io.stdout,
      `Key ${item.id} "${inertLine(item.token_name)}" was already revoked (${utcMinute(item.revoked_at)}).`,
    );
    return EXIT.ok;
  }
  line(
    io.stdout,
    `Revoked key ${revoked.id} "${inertLine(revoked.token_name)}" (${inertLine(revoked.token_prefix)}…): anything using it now gets 401.`,
  );
  if (heldHere) line(io.stdout, 'It was this terminal’s key; it is removed from this machine too.');
  return EXIT.ok;
}
