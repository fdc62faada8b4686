import OAuth2Server from '@node-oauth/oauth2-server';
import { Router } from 'express';
import type { Deps } from '../src/deps.js';
import { OAUTH_RESOURCES, type OAuthResource } from '../src/db/schema.js';
import { requestOrigin } from '../src/http/origin.js';
import { createDeviceAuthorization, pollDeviceCode } from '../src/device/store.js';
import { authenticateClient } from './client-auth.js';
import { DEVICE_CODE_GRANT } from './metadata.js';
import {
  approvalScope,
  namedAmongApproved,
  OAuthProtocolError,
  parseResources,
  requestedResources,
} from './params.js';
import { issueApproval } from './token-issue.js';
import {
  asLibraryError,
  libraryError,
  tokenResult,
  type LibraryClient,
  type RequestContext,
} from './token-model.js';

// The device authorization grant (RFC 8628) over the shared device-code store (CONTRACT §6, §7): the
// client asks at /oauth/device_authorization, the person approves the user code on /account/device
// (choosing the organization), and the client polls the token endpoint with the device_code grant,
// implemented as an extension grant of @node-oauth/oauth2-server.

const POLL_ERRORS: Record<string, string> = {
  authorization_pending: 'the user has not yet approved this code',
  slow_down: 'polling too fast; wait longer between polls',
  access_denied: 'the user denied the request',
  expired_token: 'the device code has expired or was already used',
};

export class DeviceCodeGrantType extends OAuth2Server.AbstractGrantType {
  // The library's typings want its own Request/Client; ours are structurally what it passes.
  // @ts-expect-error narrower parameter types than the abstract signature
  async handle(request: { body: Record<string, unknown> }, client: LibraryClient) {
    const ctx = (this as unknown as { model: { ctx: RequestContext } }).model.ctx;
    const deviceCode = request.body.device_code;
    if (typeof deviceCode !== 'string' || deviceCode === '')
      throw libraryError('invalid_request', 'device_code is required');
    let named: OAuthResource[] | null;
    try {
      named = parseResources(ctx.issuer, request.body.resource);
    } catch (err) {
      throw asLibraryError(err);
    }
    const poll = await pollDeviceCode(ctx.deps, deviceCode, 'oauth', (_tx, row) => {
      // Checked inside the consuming transaction: throwing rolls the consumption back.
      if (row.oauthClientId !== client.id)
        throw libraryError('invalid_grant', 'this device code was issued to another client');
      // Bound to the origin that issued it, like an authorization code (CONTRACT §7): a code issued at
      // LIGHT must not yield V2-audience tokens.
      if (row.issuer !== ctx.issuer)
        throw libraryError('invalid_grant', 'this device code was issued by another origin');
      if (!row.userId || !row.orgId) throw libraryError('invalid_grant', 'the device code has no approval');
      const approved = (row.resources ?? []).filter((r): r is OAuthResource =>
        (OAUTH_RESOURCES as readonly string[]).includes(r),
      );
      try {
        namedAmongApproved(ctx.issuer, request.body.resource, approved);
        return approved;
      } catch (err) {
        throw asLibraryError(err);
      }
    });
    if (poll.status !== 'approved') {
      throw libraryError(poll.status, POLL_ERRORS[poll.status] ?? poll.status);
    }
    const resources = (poll as { issued: OAuthResource[] }).issued;
    const issued = await issueApproval(ctx.deps, {
      clientId: client.id,
      userId: poll.row.userId!,
      orgKey: poll.row.orgId!,
      allOrgs: poll.row.allOrgs,
      scope: poll.row.scope,
      issuer: ctx.issuer,
      resources,
      named,
      auditOrigin: ctx.auditOrigin,
    });
    return tokenResult(issued, client, { id: poll.row.userId });
  }
}

/** POST /oauth/device_authorization (RFC 8628 §3.1–3.2). */
export function deviceAuthorizationRoutes(deps: Deps): Router {
  const router = Router();
  // The per-address limit of the device routes (CONTRACT §1).
  router.post('/oauth/device_authorization', deps.limits.perIp, async (req, res) => {
    res.set('Cache-Control', 'no-store');
    const origin = requestOrigin(req, deps.config);
    const body = (req.body ?? {}) as Record<string, unknown>;
    const client = await authenticateClient(deps, req);
    if (!client.grantTypes.includes(DEVICE_CODE_GRANT)) {
      throw new OAuthProtocolError(
        'unauthorized_client',
        'this client may not use the device authorization grant',
      );
    }
    const resources = requestedResources(origin, body);
    const auth = await createDeviceAuthorization(deps, {
      flow: 'oauth',
      oauthClientId: client.clientId,
      issuer: origin,
      resources,
      scope: approvalScope(resources, body, client.clientId),
    });
    const verificationUri = `${origin}/account/device`;
    res.json({
      device_code: auth.deviceCode,
      user_code: auth.userCode,
      verification_uri: verificationUri,
      verification_uri_complete: `${verificationUri}?user_code=${encodeURIComponent(auth.userCode)}`,
      expires_in: auth.expiresIn,
      interval: auth.interval,
    });
  });
  return router;
}
