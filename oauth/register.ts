import { randomBytes } from 'node:crypto';
import { Router } from 'express';
import { z } from 'zod';
import type { Deps } from '../src/deps.js';
import { oauthClients } from '../src/db/schema.js';
import { hmacSecret } from '../src/crypto/hash.js';
import { randomToken, unix } from '../src/ids.js';
import { DEVICE_CODE_GRANT } from './metadata.js';
import { OAuthProtocolError } from './params.js';
import { redirectUriProblem } from './redirect-uris.js';

// POST /oauth/register: dynamic client registration (RFC 7591). 201 with the client's metadata; a
// secret (stored as HMAC) for confidential clients, with client_secret_expires_at 0 (never) whenever a
// secret is issued; public clients use token_endpoint_auth_method "none". Redirect URIs: the rule of
// oauth/redirect-uris.ts (https, loopback http, a private-use scheme; no fragments).

const GRANTS = ['authorization_code', 'refresh_token', DEVICE_CODE_GRANT] as const;

const metadataSchema = z.object({
  redirect_uris: z.array(z.string().max(2000)).max(20).optional(),
  client_name: z.string().trim().min(1).max(200).optional(),
  client_uri: z
    .url({ protocol: /^https?$/ })
    .max(2000)
    .optional(),
  grant_types: z.array(z.string()).max(10).optional(),
  response_types: z.array(z.string()).max(5).optional(),
  token_endpoint_auth_method: z.string().optional(),
  scope: z.string().max(200).optional(),
  software_id: z.string().max(200).optional(),
  software_version: z.string().max(100).optional(),
});

export function registrationRoutes(deps: Deps): Router {
  const router = Router();
  // Registration is unauthenticated and writes a row: the per-address limit applies (CONTRACT §1).
  router.post('/oauth/register', deps.limits.perIp, async (req, res) => {
    res.set('Cache-Control', 'no-store');
    const parsed = metadataSchema.safeParse(req.body ?? {});
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new OAuthProtocolError(
        'invalid_client_metadata',
        `${issue.path.join('.') || 'body'}: ${issue.message}`,
      );
    }
    const m = parsed.data;
    const grantTypes = m.grant_types ?? ['authorization_code', 'refresh_token'];
    const unknownGrant = grantTypes.find((g) => !(GRANTS as readonly string[]).includes(g));
    if (unknownGrant)
      throw new OAuthProtocolError('invalid_client_metadata', `grant type ${unknownGrant} is not supported`);
    const responseTypes = m.response_types ?? (grantTypes.includes('authorization_code') ? ['code'] : []);
    if (responseTypes.some((r) => r !== 'code'))
      throw new OAuthProtocolError('invalid_client_metadata', 'only the code response type is supported');
    const redirectUris = m.redirect_uris ?? [];
    if (grantTypes.includes('authorization_code') && redirectUris.length === 0) {
      throw new OAuthProtocolError(
        'invalid_redirect_uri',
        'redirect_uris is required for the authorization code grant',
      );
    }
    for (const uri of redirectUris) {
      const problem = redirectUriProblem(uri);
      if (problem)
        throw new OAuthProtocolError(
          'invalid_redirect_uri',
          `redirect URI ${JSON.stringify(uri.slice(0, 200))} ${problem}`,
        );
    }
    // RFC 7591 §2: the default method is client_secret_basic.
    const method = m.token_endpoint_auth_method ?? 'client_secret_basic';
    if (!['none', 'client_secret_basic', 'client_secret_post'].includes(method)) {
      throw new OAuthProtocolError(
        'invalid_client_metadata',
        `token_endpoint_auth_method ${method} is not supported`,
      );
    }
    const clientId = `dcr_${randomToken()}`;
    const secret = method === 'none' ? null : `scs_${randomBytes(32).toString('base64url')}`;
    const [row] = await deps.db
      .insert(oauthClients)
      .values({
        clientId,
        source: 'registered',
        clientName: m.client_name ?? null,
        clientUri: m.client_uri ?? null,
        redirectUris,
        grantTypes,
        tokenEndpointAuthMethod: method,
        clientSecretHash: secret ? hmacSecret(deps.keys.hmac, secret) : null,
      })
      .returning();
    res.status(201).json({
      client_id: clientId,
      client_id_issued_at: unix(row!.createdAt),
      ...(secret ? { client_secret: secret, client_secret_expires_at: 0 } : {}),
      redirect_uris: redirectUris,
      grant_types: grantTypes,
      response_types: responseTypes,
      token_endpoint_auth_method: method,
      ...(m.client_name ? { client_name: m.client_name } : {}),
      ...(m.client_uri ? { client_uri: m.client_uri } : {}),
      ...(m.software_id ? { software_id: m.software_id } : {}),
      ...(m.software_version ? { software_version: m.software_version } : {}),
    });
  });
  return router;
}
