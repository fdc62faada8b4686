import { eq, sql } from 'drizzle-orm';
import type { Deps } from '../src/deps.js';
import type { AuditOrigin } from '../src/audit/context.js';
import { oauthRefreshTokens, type OAuthResource } from '../src/db/schema.js';
import { hmacSecret } from '../src/crypto/hash.js';
import { REFRESH_TOKEN_TTL_SECONDS, revokeGrants, successorOf, type GrantRow } from './grants.js';
import { createBatcher } from '../src/db/batch.js';

// Refresh-token families (CONTRACT §7; RFC 9700 §4.14.2): one family per grant, rotation on every use,
// and reuse of a rotated token revokes the grant. Two refreshes with the same token racing each other
// (a client retrying, two tabs) must not lock the user out, so a token rotated less than
// REUSE_GRACE_SECONDS ago, whose successor has not itself been used, is answered with that same
// successor (derived deterministically: grants.ts successorOf) instead of being treated as theft.

export const REUSE_GRACE_SECONDS = 10;

/** What a refresh needs of the grant: whose it is and what its access token says. */
export type RefreshGrant = Pick<GrantRow, 'id' | 'clientId' | 'userId' | 'org' | 'resource' | 'scope'>;

/** The request as the find statement must match it before it rotates the token at once. */
export interface RefreshRequest {
  issuer: string;
  clientId: string;
  /** The one resource the request named, or null when it named none. */
  resource: OAuthResource | null;
  /** False when a check after the find could still refuse the request: the statement then only reads. */
  rotate: boolean;
}

/** What the find statement read of a presented token and its grant. */
export interface FoundRefreshToken {
  grant: RefreshGrant;
  /** The origin that granted it (a grant answers only there). */
  issuer: string;
  /** Unexpired, and its grant not revoked. */
  live: boolean;
  /** When an earlier request rotated it; null when it was unrotated as this statement began. */
  rotatedAtMs: number | null;
  /** This statement rotated it and stored its successor. */
  rotatedNow: boolean;
}

interface RedeemRow {
  n: number;
  grant_id: string;
  client_id: string;
  user_id: string;
  org: string;
  resource: OAuthResource;
  scope: string;
  issuer: string;
  revoked: boolean;
  expired: boolean;
  expires_at_ms: number;
  rotated_at_ms: number | null;
  rotated_now: boolean;
}

// The presented row is read from the statement's snapshot, before `rotated` changed it: rotated_now says
// whether this statement rotated it, rotated_at_ms whether an earlier request had. One statement serves a
// batch of requests (redeemBatcher below), one element of each array per request; `n` (1-based) says
// whose a row is. The same token twice in one batch is rotated for one of them only (an UPDATE joined to
// two request rows updates its row once); the other finds it unrotated but not rotated_now, as a request
// that lost a race to a parallel refresh does, and is decided the same way.
// $1 token hashes, $2 rotate, $3 issuers, $4 clients, $5 resources named (or null), $6 successor hashes,
// $7 successor expiries.
// The arrays are read through a subquery that is not pulled up (offset 0): unnest of a parameter itself
// lets the planner count the elements of each call's arrays, so it planned every call afresh (a custom
// plan, cheaper on paper than a generic one for any array length) and never kept a generic plan. Each
// request's token is looked up on its own (a lateral subquery, not pulled up either: an index lookup per
// request, as the one-request statement made), its grant likewise, and it is rotated by its row's
// address (ctid, read in the same statement): joins the planner could turn into scans of the whole table
// when its generic plan was made while the table was small. The grant is read from the statement's
// snapshot, as the one-request statement's join read it. A row a parallel refresh rotated meanwhile is
// re-checked by PostgreSQL on its newest version, as any UPDATE's, and no longer matches (rotated_at set).
const REDEEM = `with req as (
    select r.* from (select $1::text[] a, $2::boolean[] b, $3::text[] c, $4::text[] d, $5::text[] e,
      $6::text[] f, $7::timestamptz[] g offset 0) p,
      unnest(p.a, p.b, p.c, p.d, p.e, p.f, p.g) with ordinality
      as r(token_hash, rotate, issuer, client_id, resource, successor_hash, successor_expires_at, n)
  ), presented as (
    select r.*, t.tid, t.expires_at, t.rotated_at, g.id as grant_id, g.client_id as grant_client,
      g.user_id, g.org, g.resource as grant_resource, g.scope, g.issuer as grant_issuer, g.revoked_at
    from req r cross join lateral (
      select t.ctid as tid, t.grant_id, t.expires_at, t.rotated_at
      from oauth_refresh_tokens t where t.token_hash = r.token_hash offset 0
    ) t cross join lateral (select * from oauth_grants g where g.id = t.grant_id offset 0) g
  ), rotated as (
    update oauth_refresh_tokens t set rotated_at = now()
    from presented p
    where p.rotate and t.ctid = p.tid and t.token_hash = p.token_hash and t.rotated_at is null
      and t.expires_at > now() and p.revoked_at is null and p.grant_issuer = p.issuer
      and p.grant_client = p.client_id and p.grant_resource = coalesce(p.resource, p.grant_resource)
    returning p.n, p.grant_id, p.successor_hash, p.successor_expires_at
  ), successor as (
    insert into oauth_refresh_tokens (token_hash, grant_id, expires_at)
    select successor_hash, grant_id, successor_expires_at from rotated
    on conflict do nothing
  )
  select p.n::int as n, p.grant_id, p.grant_client as client_id, p.user_id, p.org,
    p.grant_resource as resource, p.scope, p.grant_issuer as issuer,
    p.revoked_at is not null as revoked, p.expires_at <= now() as expired,
    (extract(epoch from p.expires_at) * 1000)::float8 as expires_at_ms,
    (extract(epoch from p.rotated_at) * 1000)::float8 as rotated_at_ms,
    exists (select 1 from rotated x where x.n = p.n) as rotated_now
  from presented p`;

interface RedeemInput {
  tokenHash: string;
  rotate: boolean;
  issuer: string;
  clientId: string;
  resource: OAuthResource | null;
  successorHash: string;
  successorExpiry: string;
}

/**
 * Runs REDEEM for a batch as a named statement: PostgreSQL parses it once per pooled connection and, after
 * its first runs, keeps a generic plan (the ORM's unnamed statement was parsed and planned on every
 * refresh: bench/README.md, oauth). It writes, so it goes through the pool, not the read lane.
 * Answers each input's row (undefined: no such token).
 */
async function redeemStatement(deps: Deps, inputs: RedeemInput[]): Promise<(RedeemRow | undefined)[]> {
  const values = [
    inputs.map((i) => i.tokenHash),
    inputs.map((i) => i.rotate),
    inputs.map((i) => i.issuer),
    inputs.map((i) => i.clientId),
    inputs.map((i) => i.resource),
    inputs.map((i) => i.successorHash),
    inputs.map((i) => i.successorExpiry),
  ];
  const { pool, pglite } = deps.database;
  const rows = pool
    ? (await pool.query<RedeemRow>({ name: 'oauth_refresh_redeem', text: REDEEM, values })).rows
    : (await pglite!.query<RedeemRow>(REDEEM, values)).rows;
  const byInput: (RedeemRow | undefined)[] = inputs.map(() => undefined);
  for (const row of rows) byInput[row.n - 1] = row;
  return byInput;
}

/**
 * Group commit (src/db/batch.ts, as the model path's statements): while one redeeming statement is in
 * flight, the refreshes that reach it meanwhile wait and then go together, in one statement and one
 * commit (at most 64); a lone refresh goes at once. PostgreSQL's per-statement and per-commit work (the
 * executor's start, the WAL flush) and the driver's per-query work are paid once per batch
 * (bench/README.md, oauth). Each request is still answered only after the commit that rotated its token.
 * One batcher per database (the process's pool, or the embedded engine).
 */
type Redeem = (input: RedeemInput) => Promise<RedeemRow | undefined>;
const batchers = new WeakMap<object, Redeem>();

function redeemBatcher(deps: Deps): Redeem {
  let batcher = batchers.get(deps.database);
  if (!batcher) {
    batcher = createBatcher((inputs: RedeemInput[]) => redeemStatement(deps, inputs), { maxBatch: 64 });
    batchers.set(deps.database, batcher);
  }
  return batcher;
}

/**
 * Finds a presented refresh token with its grant and, in the same statement, rotates it when the request
 * can only succeed: the token unrotated and unexpired, its grant live, granted by this issuer to this
 * client, for the resource named (the guarded UPDATE in REDEEM: of two racing requests only one matches).
 * Rotating stores the successor too, so a refresh costs one round trip, shared with the other refreshes
 * waiting for the same statement (redeemBatcher; bench/README.md, oauth). Null: no such token.
 * Everything else is decided by the caller from what the statement read (oauth/refresh-grant.ts).
 */
export async function findRefreshToken(
  deps: Deps,
  token: string,
  request: RefreshRequest,
): Promise<FoundRefreshToken | null> {
  const row = await redeemBatcher(deps)({
    tokenHash: hmacSecret(deps.keys.hmac, token),
    rotate: request.rotate,
    issuer: request.issuer,
    clientId: request.clientId,
    resource: request.resource,
    successorHash: hmacSecret(deps.keys.hmac, successorOf(deps.keys.hmac, token)),
    successorExpiry: new Date(Date.now() + REFRESH_TOKEN_TTL_SECONDS * 1000).toISOString(),
  });
  if (!row) return null;
  return {
    grant: {
      id: row.grant_id,
      clientId: row.client_id,
      userId: row.user_id,
      org: row.org,
      resource: row.resource,
      scope: row.scope,
    },
    issuer: row.issuer,
    live: !row.revoked && !row.expired,
    rotatedAtMs: row.rotated_at_ms,
    rotatedNow: row.rotated_now,
  };
}

/**
 * A token rotated earlier, presented again: a client's retry or a second tab inside the grace window,
 * while its successor is still unused (answered with that same successor), else a replay.
 */
export async function isRetryWithinGrace(deps: Deps, token: string, rotatedAtMs: number): Promise<boolean> {
  if (Date.now() - rotatedAtMs > REUSE_GRACE_SECONDS * 1000) return false;
  const [successor] = await deps.db
    .select({ rotatedAt: oauthRefreshTokens.rotatedAt })
    .from(oauthRefreshTokens)
    .where(eq(oauthRefreshTokens.tokenHash, hmacSecret(deps.keys.hmac, successorOf(deps.keys.hmac, token))));
  // The successor already moved on: the old token coming back now is a replay, not a race.
  return !successor || successor.rotatedAt === null;
}

/** Reuse of a rotated token (RFC 9700 §4.14.2): the grant goes, and with it every token of its family. */
export const revokeFamily = (deps: Deps, grantId: string, auditOrigin: AuditOrigin): Promise<void> =>
  revokeGrants(deps.db, [grantId], 'refresh_token_reused', auditOrigin);

/**
 * Rotates a token the find statement did not: one inside the grace window, one whose find lost a race to
 * a parallel refresh, or one found without rotating. Marks it used (only if it is not yet) and stores
 * its successor (a no-op when it is stored already); every such request gets the same successor.
 */
export async function rotateRefreshToken(deps: Deps, token: string, grantId: string): Promise<string> {
  const tokenHash = hmacSecret(deps.keys.hmac, token);
  const successor = successorOf(deps.keys.hmac, token);
  // One statement, one round trip: mark the presented token rotated (only if it is not yet) and store
  // its successor (a no-op when a parallel refresh stored it first).
  await deps.db.execute(sql`
    with rotated as (
      update oauth_refresh_tokens set rotated_at = now() where token_hash = ${tokenHash} and rotated_at is null
    )
    insert into oauth_refresh_tokens (token_hash, grant_id, expires_at)
    values (${hmacSecret(deps.keys.hmac, successor)}, ${grantId}, ${new Date(Date.now() + REFRESH_TOKEN_TTL_SECONDS * 1000).toISOString()})
    on conflict do nothing`);
  return successor;
}
