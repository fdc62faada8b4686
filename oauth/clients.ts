import { eq } from 'drizzle-orm';
import type { Deps } from '../src/deps.js';
import { oauthClients } from '../src/db/schema.js';
import { constantTimeEqual, hmacSecret } from '../src/crypto/hash.js';
import { errorOf } from '../src/http/errors.js';
import { OAUTH_ERRORS } from './errors.js';
import { BUILTIN_CLI_CLIENT } from './builtin.js';
import { BUILTIN_CLI_CLIENT_ID } from '../src/ids.js';
import { fetchClientMetadataDocument, isMetadataDocumentUrl } from './client-metadata.js';
import { redirectUriProblem } from './redirect-uris.js';
import type { OAuthClient } from './client-record.js';

// Who a client_id names (CONTRACT §7): the built-in public client `svc-cli`, a dynamically registered
// client (RFC 7591), or a client ID metadata document (an https URL; http://localhost in DEV_MODE).

export type { OAuthClient };

/** The client, or null when the id names none (unknown id, unreachable or invalid metadata document). */
export async function findClient(deps: Deps, clientId: string): Promise<OAuthClient | null> {
  if (clientId === BUILTIN_CLI_CLIENT_ID) return { ...BUILTIN_CLI_CLIENT };
  if (isMetadataDocumentUrl(clientId, deps.config.devMode))
    return fetchClientMetadataDocument(deps, clientId);
  if (clientId.length > 200) return null;
  let row;
  try {
    [row] = await deps.db.select().from(oauthClients).where(eq(oauthClients.clientId, clientId));
  } catch {
    // Fail closed, and say what could not be established (not a membership).
    throw errorOf(OAUTH_ERRORS, 'temporarily_unavailable');
  }
  if (!row || row.source !== 'registered') return null;
  return { ...row, source: 'registered' };
}

export const isPublicClient = (client: OAuthClient): boolean => client.tokenEndpointAuthMethod === 'none';

/**
 * Client authentication at the token, revocation and introspection endpoints (RFC 6749 §2.3): a
 * confidential client must present its secret; a public client must not present one.
 */
export function clientAuthenticates(deps: Deps, client: OAuthClient, secret: string | undefined): boolean {
  if (isPublicClient(client)) return !secret;
  if (!secret || !client.clientSecretHash) return false;
  return constantTimeEqual(hmacSecret(deps.keys.hmac, secret), client.clientSecretHash);
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', '[::1]', 'localhost']);

/**
 * Exact redirect URI matching (RFC 9700 §4.1.3), with one allowance: for a registered loopback
 * redirect (http://127.0.0.1, http://[::1], http://localhost) any port is accepted, since native apps
 * pick a free port at run time (RFC 8252 §7.3). Everything else — scheme, host, path, query — must match.
 */
export function redirectUriAllowed(client: OAuthClient, requested: string): boolean {
  let req: URL;
  try {
    req = new URL(requested);
  } catch {
    return false;
  }
  // Also checked here, not only at registration: a row stored under an older rule never redirects.
  if (redirectUriProblem(requested) !== null) return false;
  for (const registered of client.redirectUris) {
    if (registered === requested) return true;
    let reg: URL;
    try {
      reg = new URL(registered);
    } catch {
      continue;
    }
    if (
      reg.protocol === 'http:' &&
      LOOPBACK_HOSTS.has(reg.hostname) &&
      req.protocol === 'http:' &&
      req.hostname === reg.hostname
    ) {
      if (req.pathname === reg.pathname && req.search === reg.search) return true;
    }
  }
  return false;
}
