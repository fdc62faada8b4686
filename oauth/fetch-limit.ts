import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Deps } from '../src/deps.js';
import { isMetadataDocumentUrl } from './client-metadata.js';

// The per-address limit (RATE_LIMIT_IP_PER_MIN, CONTRACT §1) on the /oauth/* requests that can make the
// server fetch a client ID metadata document: those whose client_id — query, form body, or the Basic
// credentials' user name — is a document URL. Requests naming svc-cli or a registered
// client fetch nothing and are not counted. /oauth/device_authorization and /oauth/register carry the
// limit on every request already.

export const FETCHING_PATHS = ['/oauth/authorize', '/oauth/token', '/oauth/revoke', '/oauth/introspect'];

function basicUser(header: string | undefined): string | undefined {
  const m = header ? /^Basic\s+(\S+)/i.exec(header) : null;
  if (!m) return undefined;
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  try {
    return decodeURIComponent(colon >= 0 ? decoded.slice(0, colon) : decoded);
  } catch {
    return undefined;
  }
}

/** Express middleware, and a step of the token request's own entry on plain node objects (oauth/token-entry.ts). */
export function limitMetadataFetches(deps: Deps) {
  return (
    req: IncomingMessage & { query?: unknown; body?: unknown },
    res: ServerResponse,
    next: (err?: unknown) => void,
  ) => {
    const query = (req.query ?? {}) as Record<string, unknown>;
    const body = (req.body ?? {}) as Record<string, unknown>;
    const named = [query.client_id, body.client_id, basicUser(req.headers.authorization)];
    const fetches = named.some(
      (id) => typeof id === 'string' && isMetadataDocumentUrl(id, deps.config.devMode),
    );
    if (!fetches) return next();
    return deps.limits.perIp(req as never, res as never, next);
  };
}
