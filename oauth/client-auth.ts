import type { IncomingMessage } from 'node:http';
import type { Request } from 'express';
import type { Deps } from '../src/deps.js';
import { clientAuthenticates, findClient, type OAuthClient } from './clients.js';
import { OAuthProtocolError } from './params.js';

// Client authentication for the endpoints we serve without the library (device authorization,
// revocation, introspection, the refresh grant): client_secret_basic, client_secret_post, or `none` (client_id alone) for
// public clients (RFC 6749 §2.3.1; RFC 7009 §2.1; RFC 7662 §2.1 leaves the method to the server).

export function clientCredentials(req: Pick<IncomingMessage, 'headers'> & { body?: unknown }): {
  clientId?: string;
  secret?: string;
  basic: boolean;
} {
  const header = req.headers.authorization;
  const m = header ? /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(header) : null;
  if (header && !m)
    throw new OAuthProtocolError('invalid_client', 'unsupported client authentication scheme');
  if (m) {
    const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
    const i = decoded.indexOf(':');
    if (i < 0) throw new OAuthProtocolError('invalid_client', 'malformed Basic credentials');
    // RFC 6749 §2.3.1: both parts are form-urlencoded before being joined.
    const dec = (v: string) => {
      try {
        return decodeURIComponent(v.replace(/\+/g, ' '));
      } catch {
        throw new OAuthProtocolError('invalid_client', 'malformed Basic credentials');
      }
    };
    return { clientId: dec(decoded.slice(0, i)), secret: dec(decoded.slice(i + 1)), basic: true };
  }
  const body = (req.body ?? {}) as Record<string, unknown>;
  const str = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
  return { clientId: str(body.client_id), secret: str(body.client_secret), basic: false };
}

/** The authenticated client, or 401 invalid_client. */
export async function authenticateClient(deps: Deps, req: Request): Promise<OAuthClient> {
  return authenticateCredentials(deps, clientCredentials(req));
}

/** The client the credentials (read by clientCredentials) authenticate, or 401 invalid_client. */
export async function authenticateCredentials(
  deps: Deps,
  { clientId, secret }: { clientId?: string; secret?: string },
): Promise<OAuthClient> {
  if (!clientId)
    throw new OAuthProtocolError('invalid_client', 'client authentication is required (client_id)');
  const client = await findClient(deps, clientId);
  if (!client || !clientAuthenticates(deps, client, secret)) {
    throw new OAuthProtocolError('invalid_client', 'client authentication failed');
  }
  return client;
}
