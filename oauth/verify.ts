import { errors as joseErrors, jwtVerify, type JWTHeaderParameters, type JWTPayload } from 'jose';
import type { Deps } from '../src/deps.js';
import { type OAuthResource, type Role } from '../src/db/schema.js';
import { createBatcher } from '../src/db/batch.js';
import type { Database } from '../src/db/client.js';
import { COMMON_ERRORS, errorOf, membershipUnavailable, type AppError } from '../src/http/errors.js';
import { OAUTH_ERRORS } from './errors.js';
import { parseOrgId } from '../src/ids.js';
import { liveRole, requireLiveMembership } from '../src/orgs/membership.js';
import { SIGNING_ALG } from './keys.js';
import { resourceMetadataUrl, resourceUrl } from './resources.js';

// The one verifier every resource server uses (CONTRACT §7): the MCP server for `platform`, the model
// routes for `model`. It checks signature, issuer (byte-identical to the origin the request arrived
// on), audience (that origin's resource URL), expiry, that the grant is not revoked, and live
// membership — the last two against the database on every call, never from a cache, so a revocation
// or a removal takes effect on the next request. It takes a bearer string: cookies never reach it.

export { resourceUrl };

export interface VerifiedAccess {
  userId: string;
  orgKey: string;
  clientId: string;
  grantId: string;
  scope: string;
  resource: OAuthResource;
  jti: string;
  /** The user's live role in the grant's org, read with the grant (so a caller acting there reads no more). */
  role: Role;
  /**
   * The grant acts only in its own org (CONTRACT §7: a client other than svc-cli, "all my
   * organizations" not ticked): x-svc-organisation or an MCP org_id naming another org is refused.
   */
  orgBound: boolean;
}

interface GrantCheck {
  grantId: string;
  userId: string;
  orgKey: string;
  resource: OAuthResource;
}

interface GrantState {
  /** The grant exists for this user, org and resource and is not revoked. */
  live: boolean;
  /** The user's live role in the org (a live membership of a live org), or null. */
  role: Role | null;
  /** The grant spans every live membership of the user (oauth_grants.all_orgs). */
  allOrgs: boolean;
}

// The grant and the membership are read in one statement, and concurrent verifications share it
// (src/db/batch.ts group commit): under load, one read per batch instead of two per request. Each
// statement starts after its requests arrived and nothing is kept between batches, so a revocation or a
// removal still takes effect on the next request. It runs on the read lane (src/db/lane.ts), as the
// `svc_` token read does: prepared once per connection and planned once (the ORM's unnamed statement was
// parsed and planned on every batch: bench/README.md, mcp), its rows read as arrays. One batcher
// per database.
const GRANT_STATE_READ = `select q.i::int, g.id is not null, case when o.deleted_at is null then m.role end, g.all_orgs
  from unnest($1::text[], $2::text[], $3::text[], $4::text[]) with ordinality as q(grant_id, user_id, org, resource, i)
  left join oauth_grants g on g.id = q.grant_id and g.user_id = q.user_id and g.org = q.org
    and g.resource = q.resource and g.revoked_at is null
  left join memberships m on m.org_id = q.org and m.user_id = q.user_id
  left join orgs o on o.id = m.org_id`;

const grantStates = new WeakMap<Database, (check: GrantCheck) => Promise<GrantState>>();

function grantStateOf(database: Database): (check: GrantCheck) => Promise<GrantState> {
  let lookup = grantStates.get(database);
  if (!lookup) {
    lookup = createBatcher<GrantCheck, GrantState>(async (checks) => {
      // One array parameter per column, zipped back by unnest.
      const rows = await database.readLane.rows('oauth_grant_state', GRANT_STATE_READ, [
        checks.map((c) => c.grantId),
        checks.map((c) => c.userId),
        checks.map((c) => c.orgKey),
        checks.map((c) => c.resource),
      ]);
      const byIndex = new Map(rows.map((r) => [Number(r[0]), r]));
      return checks.map((_, k) => {
        const row = byIndex.get(k + 1);
        return {
          live: row?.[1] === true,
          role: (row?.[2] as Role | null | undefined) ?? null,
          allOrgs: row?.[3] === true,
        };
      });
    });
    grantStates.set(database, lookup);
  }
  return lookup;
}

// Tokens whose signature and claims were verified, remembered by their bytes and where they were
// presented. What jose checks (signature, alg, typ, iss, aud, required claims) is a
// function of those alone, except for the key and the clock, which are checked on every request: the
// key must still be published (a retired key's tokens stop verifying at once) and `exp` must not have
// passed. What can change while a token lives is never remembered: the grant's revocation and the
// membership are read on every request, below. An MCP client presents one access token for up to 15
// minutes; a remembered one skips the ES256 verification (≈ 290 µs CPU: bench/README.md, mcp).
// Bounded: the oldest entry leaves when the map is full; only tokens that verified enter it. One map per
// key set (a process serves one; tests start several).
const VERIFIED_MAX = 10_000;
type Remembered = Map<string, { payload: JWTPayload; kid: string; exp: number }>;
const verifiedBySigningKeys = new WeakMap<object, Remembered>();

function verifiedOf(deps: Pick<Deps, 'signingKeys'>): Remembered {
  let verified = verifiedBySigningKeys.get(deps.signingKeys);
  if (!verified) verifiedBySigningKeys.set(deps.signingKeys, (verified = new Map() as Remembered));
  return verified;
}

async function rememberedPayload(
  deps: Pick<Deps, 'signingKeys'>,
  key: string,
): Promise<JWTPayload | undefined> {
  const verified = verifiedOf(deps);
  const hit = verified.get(key);
  if (!hit) return undefined;
  // jose's rule (RFC 7519 §4.1.4): expired when exp <= now, in whole seconds.
  if (hit.exp <= Math.floor(Date.now() / 1000) || !(await deps.signingKeys.publicKey(hit.kid))) {
    verified.delete(key);
    return undefined;
  }
  return hit.payload;
}

function remember(
  deps: Pick<Deps, 'signingKeys'>,
  key: string,
  payload: JWTPayload,
  kid: string | undefined,
) {
  const verified = verifiedOf(deps);
  // Only what the fast path can re-check: a key id, an expiry, and no nbf (ours never carry one).
  if (!kid || typeof payload.exp !== 'number' || payload.nbf !== undefined) return;
  if (verified.size >= VERIFIED_MAX) verified.delete(verified.keys().next().value!);
  verified.set(key, { payload, kid, exp: payload.exp });
}

function invalidToken(origin: string, resource: OAuthResource, description: string): AppError {
  return errorOf(OAUTH_ERRORS, 'invalid_token', description, {
    headers: {
      'WWW-Authenticate': `Bearer error="invalid_token", resource_metadata="${resourceMetadataUrl(origin, resource)}"`,
    },
  });
}

export async function verifyAccessToken(
  deps: Pick<Deps, 'database' | 'signingKeys'>,
  token: string,
  opts: { resource: OAuthResource; origin: string },
): Promise<VerifiedAccess> {
  const { resource, origin } = opts;
  const memoKey = `${origin} ${resource} ${token}`;
  let payload = await rememberedPayload(deps, memoKey);
  if (!payload) {
    try {
      const { payload: claims, protectedHeader } = await jwtVerify(
        token,
        async (header: JWTHeaderParameters) => {
          const key = header.kid ? await deps.signingKeys.publicKey(header.kid) : null;
          if (!key) throw new joseErrors.JWKSNoMatchingKey();
          return key;
        },
        {
          algorithms: [SIGNING_ALG],
          typ: 'at+jwt', // RFC 9068 §4: reject other JWTs (an ID token, a session) presented as access tokens
          issuer: origin,
          audience: resourceUrl(origin, resource),
          requiredClaims: ['sub', 'jti', 'iat', 'exp', 'client_id', 'org'],
        },
      );
      payload = claims;
      remember(deps, memoKey, claims, protectedHeader.kid);
    } catch (err) {
      if (err instanceof joseErrors.JOSEError)
        throw invalidToken(origin, resource, 'the access token is not valid here');
      throw err;
    }
  }
  const orgKey = typeof payload.org === 'string' ? parseOrgId(payload.org) : null;
  const grantId = payload.grant_id;
  if (
    !orgKey ||
    typeof grantId !== 'string' ||
    typeof payload.client_id !== 'string' ||
    typeof payload.scope !== 'string'
  ) {
    throw invalidToken(origin, resource, 'the access token is not valid here');
  }
  let state: GrantState;
  try {
    state = await grantStateOf(deps.database)({ grantId, userId: payload.sub!, orgKey, resource });
  } catch {
    throw membershipUnavailable();
  }
  if (!state.live) throw invalidToken(origin, resource, 'the grant behind this token was revoked');
  if (!state.role) throw errorOf(COMMON_ERRORS, 'NOT_A_MEMBER');
  return {
    userId: payload.sub!,
    orgKey,
    clientId: payload.client_id,
    grantId,
    scope: payload.scope,
    resource,
    jti: payload.jti!,
    role: state.role,
    orgBound: !state.allOrgs,
  };
}

/**
 * The organization a model or MCP request acts for (CONTRACT §7): `x-svc-organisation` (either id
 * spelling) when sent — it must be a live membership of the token's user, else 403 — otherwise the
 * grant's org. A grant bound to its org (`orgBound`) may name only that org: 403 NO_ACCESS otherwise.
 * Returns the live role; callers refuse spending for `viewer` (403 viewer_cannot_spend).
 */
export async function resolveActingOrg(
  deps: Pick<Deps, 'db'>,
  access: { userId: string; orgKey: string; orgBound?: boolean },
  headerValue: string | string[] | undefined,
): Promise<{ orgKey: string; role: Role }> {
  const raw = Array.isArray(headerValue) ? headerValue[0] : headerValue;
  if (raw === undefined || raw.trim() === '') {
    return {
      orgKey: access.orgKey,
      role: await requireLiveMembership(deps.db, access.userId, access.orgKey),
    };
  }
  const orgKey = parseOrgId(raw);
  if (access.orgBound && orgKey !== access.orgKey)
    throw errorOf(
      COMMON_ERRORS,
      'NO_ACCESS',
      'this application was granted one organization only; x-svc-organisation names another',
    );
  const role = orgKey ? await liveRole(deps.db, access.userId, orgKey) : null;
  if (!orgKey || !role)
    throw errorOf(
      COMMON_ERRORS,
      'NOT_A_MEMBER',
      'x-svc-organisation names an organization this user does not belong to',
    );
  return { orgKey, role };
}
