import { Router, type Response } from 'express';
import type { Deps } from '../src/deps.js';
import { originVary, requestOrigin } from '../src/http/origin.js';
import { ACCOUNT_SCOPE, RESOURCE_PATHS, resourceUrl } from './resources.js';
import type { OAuthResource } from '../src/db/schema.js';

// Discovery on every origin, each origin its own issuer (CONTRACT §7). The issuer is the configured
// spelling of the origin the request arrived on, byte-identical to what the client used (RFC 8414 §3.3).

export const DEVICE_CODE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';

export function authorizationServerMetadata(origin: string) {
  return {
    issuer: origin,
    authorization_endpoint: `${origin}/oauth/authorize`,
    token_endpoint: `${origin}/oauth/token`,
    device_authorization_endpoint: `${origin}/oauth/device_authorization`,
    registration_endpoint: `${origin}/oauth/register`,
    revocation_endpoint: `${origin}/oauth/revoke`,
    introspection_endpoint: `${origin}/oauth/introspect`,
    jwks_uri: `${origin}/.well-known/jwks.json`,
    response_types_supported: ['code'],
    response_modes_supported: ['query'],
    grant_types_supported: ['authorization_code', 'refresh_token', DEVICE_CODE_GRANT],
    code_challenge_methods_supported: ['S256'],
    token_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post'],
    revocation_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post'],
    introspection_endpoint_auth_methods_supported: ['none', 'client_secret_basic', 'client_secret_post'],
    scopes_supported: ['model', 'platform', 'platform:read', ACCOUNT_SCOPE],
    authorization_response_iss_parameter_supported: true,
    client_id_metadata_document_supported: true,
  };
}

export function protectedResourceMetadata(origin: string, resource: OAuthResource) {
  return {
    resource: resourceUrl(origin, resource),
    authorization_servers: [origin],
    // `account` rides on the model resource ({origin}/v1), beside `model` (CONTRACT §7).
    scopes_supported: resource === 'platform' ? ['platform', 'platform:read'] : [resource, ACCOUNT_SCOPE],
    bearer_methods_supported: ['header'],
  };
}

function sendPublicJson(res: Response, vary: string, body: unknown) {
  // Public, origin-dependent documents: cacheable briefly, and readable by browser-based clients. A cache
  // must key them on what chose the origin (src/http/origin.ts originVary).
  res.setHeader('Cache-Control', 'public, max-age=300');
  res.setHeader('Access-Control-Allow-Origin', '*');
  res.setHeader('Vary', vary);
  res.json(body);
}

export function metadataRoutes(deps: Deps): Router {
  const router = Router();
  router.get('/.well-known/oauth-authorization-server', (req, res) => {
    sendPublicJson(
      res,
      originVary(deps.config),
      authorizationServerMetadata(requestOrigin(req, deps.config)),
    );
  });
  for (const resource of Object.keys(RESOURCE_PATHS) as OAuthResource[]) {
    router.get(`/.well-known/oauth-protected-resource${RESOURCE_PATHS[resource]}`, (req, res) => {
      sendPublicJson(
        res,
        originVary(deps.config),
        protectedResourceMetadata(requestOrigin(req, deps.config), resource),
      );
    });
  }
  router.get('/.well-known/jwks.json', async (_req, res) => {
    sendPublicJson(res, originVary(deps.config), await deps.signingKeys.jwks());
  });
  return router;
}
