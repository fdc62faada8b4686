import OAuth2Server from '@node-oauth/oauth2-server';
import type { Deps } from '../src/deps.js';
import type { AuditOrigin } from '../src/audit/context.js';
import type { OAuthResource } from '../src/db/schema.js';
import { OAUTH_ERRORS, type OAuthErrorCode } from './errors.js';
import { clientAuthenticates, findClient } from './clients.js';
import { consumeCode, findCode, hashCode, revokeReplayedCode, type CodeRow } from './codes.js';
import { namedAmongApproved, OAuthProtocolError, parseResources } from './params.js';
import { CodeReplayedError, issueApproval, type IssuedApproval } from './token-issue.js';

// The drizzle-backed model of @node-oauth/oauth2-server for the authorization_code grant (and the
// token-response shape of the device grant); the refresh grant is not the library's
// (oauth/refresh-grant.ts). One model per token request: it knows the issuer the request arrived on and
// the request's `resource` values, which the library does not pass to model methods. What the library
// lacks is done here: codes bound to their issuer, RFC 8707 resources, replay revocation, two grants
// per approval.

/** A library OAuthError with our error code (the library turns any other error into server_error). */
export function libraryError(error: OAuthErrorCode, description: string): Error {
  return new OAuth2Server.OAuthError(description, { code: OAUTH_ERRORS[error].status, name: error });
}

export function asLibraryError(err: unknown): unknown {
  return err instanceof OAuthProtocolError ? libraryError(err.error as OAuthErrorCode, err.message) : err;
}

export interface LibraryClient {
  id: string;
  grants: string[];
  redirectUris: string[];
}

export interface RequestContext {
  deps: Deps;
  issuer: string;
  body: Record<string, unknown>;
  /** Who approves and revokes the grants this request issues or revokes (oauth/token.ts). */
  auditOrigin: AuditOrigin;
}

/** The token object our saveToken hands back; `grants` is the only extended attribute (see token.ts). */
export function tokenResult(issued: IssuedApproval, client: unknown, user: unknown) {
  return {
    accessToken: issued.top.access_token,
    // Half a second of headroom so the library's floor() still reports the full 900 s.
    accessTokenExpiresAt: new Date(Date.now() + issued.top.expires_in * 1000 + 500),
    refreshToken: issued.top.refresh_token,
    scope: [issued.top.scope],
    client,
    user,
    grants: issued.grants,
  };
}

export async function libraryClient(
  ctx: RequestContext,
  clientId: string,
  secret: string | undefined,
): Promise<LibraryClient | null> {
  const client = await findClient(ctx.deps, clientId);
  if (!client || !clientAuthenticates(ctx.deps, client, secret)) return null;
  return { id: client.clientId, grants: client.grantTypes, redirectUris: client.redirectUris };
}

export function createTokenModel(ctx: RequestContext) {
  const { deps, issuer, auditOrigin } = ctx;
  let code: CodeRow | null = null;
  let codeResources: OAuthResource[] = [];

  return {
    getClient: (clientId: string, secret?: string) => libraryClient(ctx, clientId, secret),

    // Placeholders: the real tokens are minted in saveToken (the library would otherwise make random ones).
    generateAccessToken: () => Promise.resolve('minted-in-saveToken'),
    generateRefreshToken: () => Promise.resolve('minted-in-saveToken'),

    async getAuthorizationCode(plain: string) {
      const codeHash = hashCode(deps.keys.hmac, plain);
      const row = await findCode(deps.db, codeHash);
      if (!row) return null;
      if (row.usedAt) {
        await revokeReplayedCode(deps.db, codeHash, auditOrigin);
        return null;
      }
      // A code is redeemable only at the issuer that issued it (mix-up, RFC 9700 §4.4).
      if (row.issuer !== issuer) return null;
      try {
        namedAmongApproved(issuer, ctx.body.resource, row.resources);
        codeResources = row.resources;
      } catch (err) {
        throw asLibraryError(err);
      }
      code = row;
      return {
        authorizationCode: codeHash,
        expiresAt: row.expiresAt,
        redirectUri: row.redirectUri,
        scope: codeResources,
        codeChallenge: row.codeChallenge,
        codeChallengeMethod: 'S256',
        client: { id: row.clientId },
        user: { id: row.userId },
      };
    },

    async revokeAuthorizationCode(c: { authorizationCode: string }) {
      const consumed = await consumeCode(deps.db, c.authorizationCode);
      // Lost the race to another exchange of the same code: that is a replay too.
      if (!consumed) await revokeReplayedCode(deps.db, c.authorizationCode, auditOrigin);
      return consumed;
    },

    validateScope(_user: unknown, _client: unknown, scope?: string[]) {
      return Promise.resolve(scope ?? []);
    },

    async saveToken(_token: unknown, client: LibraryClient, user: { id: string }) {
      if (!code) throw libraryError('invalid_grant', 'no authorization code');
      try {
        const issued = await issueApproval(deps, {
          clientId: code.clientId,
          userId: code.userId,
          orgKey: code.org,
          allOrgs: code.allOrgs,
          scope: code.scope,
          issuer,
          resources: codeResources,
          named: parseResources(issuer, ctx.body.resource),
          codeHash: code.codeHash,
          auditOrigin,
        });
        return tokenResult(issued, client, user);
      } catch (err) {
        if (err instanceof CodeReplayedError)
          throw libraryError('invalid_grant', 'the authorization code was used more than once');
        throw err;
      }
    },
  };
}
