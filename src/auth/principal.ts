import type { IncomingMessage } from 'node:http';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { parse as parseCookie } from 'cookie';
import { decodeProtectedHeader } from 'jose';
import { eq } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { users, type Role } from '../db/schema.js';
import {
  AppError,
  insufficientScope,
  invalidToken,
  membershipUnavailable,
  errorOf,
  COMMON_ERRORS,
} from '../http/errors.js';
import { isSameOrigin } from '../http/origin.js';
import { hmacSecret } from '../crypto/hash.js';
import { createBatcher } from '../db/batch.js';
import { readSessionToken, SESSION_COOKIE } from './session.js';
import { lastUsedStamps } from './last-used.js';
import { API_TOKEN_PATTERN } from './api-token-secret.js';
import { verifyAccessToken } from '../../oauth/verify.js';
import { ACCOUNT_SCOPE } from '../../oauth/resources.js';
import { requestOrigin } from '../http/origin.js';
import { bearerOf } from '../http/bearer.js';

/** An RFC 9068 access token (typ at+jwt) rather than a session JWT: read from its header, unverified. */
function isAccessTokenShaped(token: string): boolean {
  try {
    return decodeProtectedHeader(token).typ === 'at+jwt';
  } catch {
    return false;
  }
}

// Who is calling an account route (interface document: Authentication 1–2). Two user credentials:
// the session (cookie `__Host-svc_session`, or its JWT as a bearer) and the durable `svc_…` token bound
// to an organization. Model and MCP routes do not use this: cookies never authenticate them (§7).

interface PrincipalUser {
  userId: string;
  email: string;
  name: string;
  emailVerified: boolean;
}

export type Principal =
  | (PrincipalUser & {
      kind: 'session';
      /** The session's public handle (ses_…), never its secret sid. */
      sessionId: string;
      viaCookie: boolean;
    })
  | (PrincipalUser & {
      kind: 'api_token';
      /** Stored key of the token's organization. */
      orgKey: string;
      tokenId: number;
      tokenName: string;
      /** Live role in that organization at this request, or null when the user no longer belongs. */
      role: Role | null;
      /** What the credential reaches (CONTRACT §6 "Credential options"): `model`, `account`. */
      scopes: string[];
    })
  | (PrincipalUser & {
      /**
       * An OAuth access token of the model resource ({origin}/v1). With scope `account` it may READ the
       * routes that opt in (`grantReads`), under the caller's role rules; nothing that writes (CONTRACT §7).
       */
      kind: 'grant';
      /** The grant's organization (the `org` claim). */
      orgKey: string;
      /** The grant acts only in orgKey (a client other than svc-cli, "all my organizations" not ticked). */
      orgBound: boolean;
      /** Live role in orgKey, read with the grant. */
      role: Role;
      grantId: string;
      clientId: string;
      scopes: string[];
    });

declare module 'express-serve-static-core' {
  interface Request {
    principal?: Principal;
  }
}

/**
 * What the credential checks read of a request: its method, headers and socket (an Express request, or a
 * plain one on the route table's rows ahead of Express: src/http/entry-steps.ts), and the principal they set.
 */
export type CallerRequest = IncomingMessage & {
  principal?: Principal;
  /** Express's header read, where the request is Express's. */
  get?(name: string): string | string[] | undefined;
};

/** A request header, read as Express's req.get reads it where there is one. */
function headerOf(req: CallerRequest, name: string): string | undefined {
  const value = req.get ? req.get(name) : req.headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

const UNSAFE = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** A service account's id: its credential's holder is a principal of that kind (CONTRACT §11). */
export const isServiceAccountId = (userId: string) => userId.startsWith('sa_');

export function createAuth(deps: Deps) {
  const { db, keys, config } = deps;
  const lastUsed = lastUsedStamps(db, deps.log);

  // The session's read, as the token's below: a named statement on the read lane, group-committed, its
  // rows as arrays (the ORM built and the server planned it on every request: decision 0130). Nothing is
  // kept across batches, so logout and a reset still take effect on the very next request.
  const SESSION_READ = `select s.secret_hash, s.user_id, s.id, u.email, u.name, u.email_verified_at is not null
    from sessions s
    join users u on u.id = s.user_id
    where s.secret_hash = any($1::text[]) and s.revoked_at is null and s.expires_at > now()`;

  interface SessionRow {
    userId: string;
    sessionId: string;
    email: string;
    name: string;
    emailVerified: boolean;
  }

  /** Secret hash → its live session row (or null), one statement per batch. */
  const lookupSession = createBatcher<string, SessionRow | null>(async (hashes) => {
    const rows = await deps.database.readLane.rows('auth_sessions', SESSION_READ, [[...new Set(hashes)]]);
    const byHash = new Map<string, SessionRow>();
    for (const [secretHash, userId, sessionId, email, name, emailVerified] of rows) {
      byHash.set(secretHash as string, {
        userId: userId as string,
        sessionId: sessionId as string,
        email: email as string,
        name: name as string,
        emailVerified: emailVerified as boolean,
      });
    }
    return hashes.map((hash) => byHash.get(hash) ?? null);
  });

  async function fromSessionToken(token: string, viaCookie: boolean): Promise<Principal | null> {
    const claims = readSessionToken(keys.session, token);
    if (!claims) return null;
    let row;
    try {
      row = await lookupSession(claims.secretHash);
    } catch {
      throw membershipUnavailable();
    }
    // The row must be live (logout and reset revoke it) and belong to the JWT's subject.
    if (!row || row.userId !== claims.userId) return null;
    return { kind: 'session', ...row, viaCookie };
  }

  // One indexed read: the token, its user, and the user's live role in the token's organization. It runs
  // before the first byte of every model call, so it skips the ORM: a statement of its own, prepared once
  // per connection (parsing and planning it on every request cost ~20× its execution: bench/verify.ts),
  // on a connection of its own (src/db/lane.ts), its rows read as arrays and its timestamps reduced to
  // the booleans the checks need. Lookups are group-committed (src/db/batch.ts): every lookup that
  // arrives while one is in flight goes in the next statement, `token_hash = any($1)`, so a busy server
  // runs one read per batch instead of one per request. Nothing is cached across batches: a lookup's
  // statement starts after the request arrived, so revocation and removal still take effect on the very
  // next request.
  const API_TOKEN_READ = `select t.token_hash, t.id, t.token_name, t.org_id, u.id, u.email, u.name,
      u.email_verified_at is not null, m.role, o.deleted_at is not null, t.scopes
    from api_tokens t
    join users u on u.id = t.user_id
    join orgs o on o.id = t.org_id
    left join memberships m on m.org_id = t.org_id and m.user_id = t.user_id
    where t.token_hash = any($1::text[]) and t.revoked_at is null
      and (t.expires_at is null or t.expires_at > now())`;

  interface ApiTokenRow {
    tokenId: number;
    tokenName: string;
    orgKey: string;
    userId: string;
    email: string;
    name: string;
    emailVerified: boolean;
    role: Role | null;
    orgDeleted: boolean;
    scopes: string[];
  }

  /** Token hash → its live row (or null), one statement per batch; a failed read rejects the whole batch. */
  const lookupApiToken = createBatcher<string, ApiTokenRow | null>(async (hashes) => {
    // Many requests of one busy client carry the same token: ask for each hash once.
    const rows = await deps.database.readLane.rows('auth_api_tokens', API_TOKEN_READ, [[...new Set(hashes)]]);
    const byHash = new Map<string, ApiTokenRow>();
    for (const [
      tokenHash,
      tokenId,
      tokenName,
      orgKey,
      userId,
      email,
      name,
      emailVerified,
      role,
      orgDeleted,
      scopes,
    ] of rows) {
      byHash.set(tokenHash as string, {
        tokenId: tokenId as number,
        tokenName: tokenName as string,
        orgKey: orgKey as string,
        userId: userId as string,
        email: email as string,
        name: name as string,
        emailVerified: emailVerified as boolean,
        role: role as Role | null,
        orgDeleted: orgDeleted as boolean,
        scopes: scopes as string[],
      });
    }
    return hashes.map((hash) => byHash.get(hash) ?? null);
  });

  async function fromApiToken(secret: string): Promise<Principal | null> {
    if (!API_TOKEN_PATTERN.test(secret)) return null;
    return fromApiTokenHash(hmacSecret(keys.hmac, secret));
  }

  /** The holder of the `svc_` token whose HMAC is `tokenHash` (a caller that worked it out already). */
  async function fromApiTokenHash(tokenHash: string): Promise<Principal | null> {
    let row;
    try {
      row = await lookupApiToken(tokenHash);
    } catch {
      throw membershipUnavailable();
    }
    if (!row) return null;
    lastUsed.touch(row.tokenId);
    return {
      kind: 'api_token',
      userId: row.userId,
      email: row.email,
      name: row.name,
      emailVerified: row.emailVerified,
      orgKey: row.orgKey,
      tokenId: row.tokenId,
      tokenName: row.tokenName,
      role: row.orgDeleted ? null : row.role,
      scopes: row.scopes,
    };
  }

  /**
   * The holder of an OAuth access token presented on a /v1 account route: verified as the model
   * resource's (oauth/verify.ts: signature, issuer and audience of this origin, expiry, grant not
   * revoked, live membership in its org). Any failure to authenticate is CONTRACT §3's 401.
   */
  async function fromGrant(token: string, req: CallerRequest): Promise<Principal | null> {
    let access;
    try {
      access = await verifyAccessToken(deps, token, {
        resource: 'model',
        origin: requestOrigin(req, config),
      });
    } catch (err) {
      if (err instanceof AppError && err.status === 401) return null;
      throw err;
    }
    const [user] = await db
      .select({ email: users.email, name: users.name, emailVerifiedAt: users.emailVerifiedAt })
      .from(users)
      .where(eq(users.id, access.userId));
    if (!user) return null;
    return {
      kind: 'grant',
      userId: access.userId,
      email: user.email,
      name: user.name,
      emailVerified: user.emailVerifiedAt !== null,
      orgKey: access.orgKey,
      orgBound: access.orgBound,
      role: access.role,
      grantId: access.grantId,
      clientId: access.clientId,
      scopes: access.scope.split(' '),
    };
  }

  /** Resolves the caller, if any. A bearer that is presented and not valid is a 401 at once. */
  async function resolve(req: CallerRequest): Promise<Principal | null> {
    const header = headerOf(req, 'authorization');
    if (header) {
      const credential = bearerOf(header);
      if (!credential) throw invalidToken();
      const principal = credential.startsWith('svc_')
        ? await fromApiToken(credential)
        : isAccessTokenShaped(credential)
          ? await fromGrant(credential, req)
          : await fromSessionToken(credential, false);
      if (!principal) throw invalidToken();
      return principal;
    }
    const cookieHeader = headerOf(req, 'cookie');
    if (!cookieHeader) return null;
    const token = parseCookie(cookieHeader)[SESSION_COOKIE];
    return token ? fromSessionToken(token, true) : null;
  }

  /** A cookie-authenticated unsafe request must come from the same origin (CONTRACT §4), else 403 CSRF. */
  function checkCsrf(req: CallerRequest, principal: Principal) {
    if (principal.kind !== 'session' || !principal.viaCookie || !UNSAFE.has(req.method ?? '')) return;
    // Sec-Fetch-Site is set by the browser and cannot be set by a page, so it decides when present.
    // Pages served with Referrer-Policy: no-referrer post `Origin: null`, which says nothing: read as
    // absent. With neither signal (not a browser, yet carrying a cookie) the request is refused.
    const site = headerOf(req, 'sec-fetch-site');
    const origin = headerOf(req, 'origin');
    const ok = site
      ? site === 'same-origin'
      : // An unsafe method only ever comes through Express (the rows ahead of it are POST routes that take
        // no cookie, and GET reads), so the request is Express's here.
        origin !== undefined && origin !== 'null' && isSameOrigin(req as Request, config, origin);
    if (!ok) throw errorOf(COMMON_ERRORS, 'CSRF', 'cross-site request refused');
  }

  interface RequireOptions {
    /** Which credentials this route takes (default both: "S|B"). */
    allow?: Principal['kind'][];
    /** Routes an unverified account may still use: logout, resend, 2FA status (CONTRACT §4). */
    allowUnverified?: boolean;
    /** A credential of any scopes may call it (GET /v1/auth/verify: CONTRACT §6); else it needs `account`. */
    anyScope?: boolean;
    /** A read route an OAuth grant with scope `account` may call (CONTRACT §7); GET and HEAD only. */
    grantReads?: boolean;
  }

  function require(options: RequireOptions = {}): RequestHandler {
    const allow = options.allow ?? ['session', 'api_token'];
    return async (req: CallerRequest, _res: Response, next: NextFunction) => {
      const principal = req.principal ?? (await resolve(req));
      if (!principal) throw invalidToken();
      // A session-only route (minting tokens, 2FA, logout, resend) does not authenticate an svc_ token:
      // CONTRACT §3's authentication failure, word for word (401 INVALID_TOKEN "invalid token").
      if (principal.kind === 'grant') {
        // Nothing that writes takes a grant, and only the routes CONTRACT §7 names read with one.
        if (!options.grantReads || (req.method !== 'GET' && req.method !== 'HEAD')) throw invalidToken();
        if (!principal.scopes.includes(ACCOUNT_SCOPE)) throw insufficientScope(ACCOUNT_SCOPE);
      } else if (!allow.includes(principal.kind)) throw invalidToken();
      // Every /v1 route that takes B other than the model routes is the `account` scope (CONTRACT §6).
      if (principal.kind === 'api_token' && !options.anyScope && !principal.scopes.includes('account')) {
        throw insufficientScope('account');
      }
      checkCsrf(req, principal);
      if (!principal.emailVerified && !options.allowUnverified) {
        throw errorOf(COMMON_ERRORS, 'EMAIL_NOT_VERIFIED', 'verify your e-mail address first');
      }
      req.principal = principal;
      next();
    };
  }

  /** Sets req.principal when a valid credential is present; never rejects a missing one. */
  const optional: RequestHandler = async (req, _res, next) => {
    req.principal = (await resolve(req)) ?? undefined;
    next();
  };

  return {
    require,
    optional,
    resolve,
    resolveApiToken: fromApiToken,
    resolveApiTokenHash: fromApiTokenHash,
    lastUseRecorded: (tokenId: number) => lastUsed.recorded(tokenId),
  };
}

export type Auth = ReturnType<typeof createAuth>;

/** The principal of a route mounted behind `auth.require()`. */
export function principalOf(req: Pick<CallerRequest, 'principal'>): Principal {
  if (!req.principal) throw invalidToken();
  return req.principal;
}

/**
 * An `svc_` token is bound to one organization (interface document: Authentication 1b) and reaches only
 * that client's resources; a session reaches every live membership. 403 NO_ACCESS otherwise.
 */
export function assertCredentialReaches(principal: Principal, orgKey: string): void {
  // A grant of a client other than svc-cli reaches only the organization chosen at consent (CONTRACT §7).
  if (
    (principal.kind === 'api_token' || (principal.kind === 'grant' && principal.orgBound)) &&
    principal.orgKey !== orgKey
  ) {
    throw errorOf(COMMON_ERRORS, 'NO_ACCESS', 'this API token is bound to another client');
  }
}
