import * as oauth from 'oauth4webapi';
import { decodeJwt } from 'jose';
import { readEntry, updateEntry, type ServerEntry, type StoredGrant } from './credentials.js';
import { CliError, EXIT, notSignedIn, signInAgain } from './errors.js';
import type { IO } from './io.js';
import { CLI_CLIENT, CLI_CLIENT_AUTH, discover, httpOptions, reach, serviceUnavailable } from './server.js';

// The signed-in state of one server: the model and platform grants from one approval (docs/oauth.md),
// refreshed before they expire, and the svc_ key of `login --api-key`.

export type GrantKind = 'model' | 'platform';

/** Refresh this long before the access token's expiry, so a call never leaves with a token about to die. */
const REFRESH_MARGIN_SECONDS = 60;

export interface TokenSet {
  access_token: string;
  refresh_token?: string;
  expires_in?: number;
  scope?: string;
  grants?: { scope: string; access_token: string; refresh_token: string; expires_in: number }[];
}

function toStored(t: { access_token: string; refresh_token?: string; expires_in?: number; scope?: string }) {
  if (!t.refresh_token) throw new CliError(EXIT.failure, 'The server issued no refresh token.');
  return {
    access_token: t.access_token,
    refresh_token: t.refresh_token,
    expires_at: Math.floor(Date.now() / 1000) + (t.expires_in ?? 900),
    scope: t.scope ?? '',
  } satisfies StoredGrant;
}

/** Which grant a token entry is, from its scope (`model` / `platform`, CONTRACT §7). */
const kindOf = (scope: string | undefined): GrantKind | undefined =>
  scope?.split(' ').includes('model')
    ? 'model'
    : scope?.split(' ').includes('platform')
      ? 'platform'
      : undefined;

/** Stores the grants of a code or device exchange: every entry of `grants`, else the top level. */
export async function saveGrants(
  io: IO,
  origin: string,
  issuer: string,
  tokens: TokenSet,
): Promise<ServerEntry> {
  const grants: NonNullable<ServerEntry['grants']> = {};
  for (const g of tokens.grants ?? [tokens]) {
    const kind = kindOf(g.scope);
    if (kind) grants[kind] = toStored(g);
  }
  const claims = decodeJwt(tokens.access_token);
  let saved: ServerEntry = {};
  await updateEntry(io.env, origin, (old) => {
    saved = {
      ...old,
      issuer,
      user: String(claims.sub),
      grant_org: String(claims.org),
      grants,
    };
    return saved;
  });
  return saved;
}

/** The organization model calls and runs act for: `svc orgs use`, else the grant's, else the API key's. */
export const actingOrg = (entry: ServerEntry): string | undefined =>
  entry.default_org ?? entry.grant_org ?? entry.api_key?.org;

export async function signedInEntry(io: IO, origin: string): Promise<ServerEntry> {
  const entry = await readEntry(io.env, origin);
  if (!entry || (!entry.grants && !entry.api_key)) throw notSignedIn(origin);
  return entry;
}

/**
 * A working access token of one grant: the stored one while it has more than a minute left, else a
 * refreshed one (refresh tokens rotate on every use, docs/oauth.md; the new pair is stored at once).
 * `force` refreshes regardless — after the server answered 401 to the stored token.
 */
export async function grantToken(io: IO, origin: string, kind: GrantKind, force = false): Promise<string> {
  const entry = await signedInEntry(io, origin);
  const grant = entry.grants?.[kind];
  if (!grant) throw notSignedIn(origin);
  if (!force && grant.expires_at - REFRESH_MARGIN_SECONDS > Date.now() / 1000) return grant.access_token;

  const as = await discover(origin);
  if (entry.issuer && as.issuer !== entry.issuer) throw signInAgain(origin);
  const response = await reach(origin, () =>
    oauth.refreshTokenGrantRequest(as, CLI_CLIENT, CLI_CLIENT_AUTH, grant.refresh_token, httpOptions(origin)),
  );
  if (response.status === 503) throw serviceUnavailable(origin, response.headers.get('retry-after'));
  let tokens: TokenSet;
  try {
    tokens = await oauth.processRefreshTokenResponse(as, CLI_CLIENT, response);
  } catch (err) {
    // invalid_grant: revoked, expired, reused or the person left the organization — only a new sign-in helps.
    if (err instanceof oauth.ResponseBodyError && err.error === 'invalid_grant') throw signInAgain(origin);
    throw err;
  }
  const fresh = toStored(tokens);
  await updateEntry(io.env, origin, (old) => ({ ...old, grants: { ...old?.grants, [kind]: fresh } }));
  return fresh.access_token;
}
