import type { NextFunction, Request, Response } from 'express';
import type { Deps } from '../src/deps.js';
import type { Role } from '../src/db/schema.js';
import { AppError, COMMON_ERRORS, errorOf } from '../src/http/errors.js';
import { OAUTH_ERRORS } from '../oauth/errors.js';
import { MCP_ERRORS } from './errors.js';
import { configuredOrigins, requestOrigin } from '../src/http/origin.js';
import { bearerOf } from '../src/http/bearer.js';
import { resolveActingOrg, verifyAccessToken } from '../oauth/verify.js';
import { resourceMetadataUrl } from '../oauth/resources.js';

// /mcp/platform as an OAuth protected resource (MCP 2025-06-18 / 2025-11-25 "Authorization";
// RFC 6750 §3; RFC 9728 §5.1; CONTRACT §3, §7):
//   - only a platform-grant access token, from the Authorization header (never a cookie, never a query
//     string; an `svc_` token or a session JWT is not an access token for this resource → 401);
//   - 401 carries `WWW-Authenticate: Bearer resource_metadata="…"` so an editor can discover the
//     authorization server, plus `error="invalid_token"` when a token was sent;
//   - 403 `insufficient_scope` names the scope; the audience check (inside the verifier) refuses a
//     model token, which is how "token passthrough" to another resource is prevented;
//   - live membership is rechecked on every request by the verifier, and `x-svc-organisation` picks
//     the acting organization among the user's live memberships.
// The Streamable HTTP transport section requires the Origin header to be validated (DNS rebinding):
// a request carrying an Origin that is not one of our configured origins is refused with 403.

export interface McpGrant {
  userId: string;
  /** The grant's organization. */
  grantOrgKey: string;
  /** The organization this request acts for (x-svc-organisation or the grant's). */
  actingOrgKey: string;
  /** The user's live role there, read by this request's verification. */
  actingRole: Role;
  /**
   * Set when the grant acts only in its own organization (CONTRACT §7): tools then refuse any other
   * org_id and any project outside it with NO_ACCESS (src/projects/access.ts boundOrgKey).
   */
  boundOrgKey: string | undefined;
  clientId: string;
  origin: string;
  /** The grant's scope is `platform:read`: it lists and calls only read-only tools (CONTRACT §10). */
  readOnly: boolean;
}

declare module 'express-serve-static-core' {
  interface Request {
    mcpGrant?: McpGrant;
  }
}

export const PLATFORM_SCOPE = 'platform';
/** The read-only platform scope a client may ask for instead of `platform` (CONTRACT §10). */
export const PLATFORM_READ_SCOPE = 'platform:read';

function challenge(origin: string, extra = ''): string {
  return `Bearer ${extra}resource_metadata="${resourceMetadataUrl(origin, 'platform')}"`;
}

/**
 * 403 `insufficient_scope` naming the full `platform` scope: the answer to a token without a platform
 * scope, and the step-up answer to a `platform:read` grant calling a tool that writes (CONTRACT §3, §10).
 */
export function insufficientScope(origin: string, message: string): AppError {
  return errorOf(COMMON_ERRORS, 'insufficient_scope', message, {
    headers: {
      'WWW-Authenticate': challenge(origin, `error="insufficient_scope", scope="${PLATFORM_SCOPE}", `),
    },
  });
}

/** A foreign Origin (a browser page on another site) is refused before anything else. */
export function checkOrigin(deps: Deps) {
  const allowed = new Set(configuredOrigins(deps.config).map((o) => new URL(o).origin));
  return (req: Request, _res: Response, next: NextFunction) => {
    const origin = req.get('origin');
    if (origin !== undefined) {
      let normalised: string | null;
      try {
        normalised = new URL(origin).origin;
      } catch {
        normalised = null;
      }
      if (!normalised || !allowed.has(normalised)) throw errorOf(MCP_ERRORS, 'FORBIDDEN_ORIGIN');
    }
    next();
  };
}

export function requirePlatformGrant(deps: Deps) {
  return async (req: Request, _res: Response, next: NextFunction) => {
    const origin = requestOrigin(req, deps.config);
    const header = req.get('authorization');
    // No bearer: a cookie, if any, is ignored (CONTRACT §7: cookies never authenticate MCP routes).
    if (!header) {
      throw errorOf(MCP_ERRORS, 'UNAUTHORIZED', undefined, {
        headers: { 'WWW-Authenticate': challenge(origin) },
      });
    }
    const token = bearerOf(header);
    if (!token || token.startsWith('svc_')) {
      throw errorOf(
        OAUTH_ERRORS,
        'invalid_token',
        'an API token is not accepted here; sign in with OAuth for the platform resource',
        { headers: { 'WWW-Authenticate': challenge(origin, 'error="invalid_token", ') } },
      );
    }
    const access = await verifyAccessToken(deps, token, { resource: 'platform', origin });
    const scopes = access.scope.split(' ');
    const full = scopes.includes(PLATFORM_SCOPE);
    if (!full && !scopes.includes(PLATFORM_READ_SCOPE))
      throw insufficientScope(origin, `this resource needs the "${PLATFORM_SCOPE}" scope`);
    // Without x-svc-organisation the grant's org acts; the verifier has just read that membership live,
    // so it is not read a second time. With the header, it must be a live membership too.
    const named = req.get('x-svc-organisation');
    const acting = named?.trim()
      ? await resolveActingOrg(deps, access, named)
      : { orgKey: access.orgKey, role: access.role };
    req.mcpGrant = {
      userId: access.userId,
      grantOrgKey: access.orgKey,
      actingOrgKey: acting.orgKey,
      actingRole: acting.role,
      boundOrgKey: access.orgBound ? access.orgKey : undefined,
      clientId: access.clientId,
      origin,
      readOnly: !full,
    };
    next();
  };
}
