import type { IncomingMessage } from 'node:http';
import type { Request } from 'express';
import type { Config } from '../config.js';
import { fromTrustedProxy } from './client-address.js';

// An origin is chosen by the request's Host (X-Forwarded-Host only when TRUST_PROXY is set) (CONTRACT §1).
// The configured spelling is returned, so that an issuer is byte-identical to what clients discovered.

/** What the origin of a request is read from: its headers, and its socket's peer (a trusted proxy?). */
export type HostedRequest = Pick<IncomingMessage, 'headers' | 'socket'>;

export function configuredOrigins(config: Config): string[] {
  return [...new Set([config.baseUrl, config.v2Url, config.lightUrl])];
}

/**
 * The Host a request was sent to. X-Forwarded-Host is read only from a trusted proxy (the socket's peer,
 * as Express's req.host decides, so CSRF checks and origins agree), and its first value, as Express
 * takes it: proxies set this header rather than append to it (docs/deploying.md § Behind a proxy).
 */
export function requestHost(req: HostedRequest, config: Config): string {
  const header = req.headers['x-forwarded-host'];
  const forwarded =
    header && fromTrustedProxy(req, config)
      ? (Array.isArray(header) ? header[0] : header)?.split(',')[0]?.trim()
      : undefined;
  return (forwarded || req.headers.host || '').toLowerCase();
}

/**
 * `Vary` for an answer that depends on the request's origin and may be cached: the Host, and
 * X-Forwarded-Host where a proxy's says which origin it is (RFC 9110 §12.5.5).
 */
export function originVary(config: Config): string {
  return config.trustProxy ? 'Host, X-Forwarded-Host' : 'Host';
}

/** Each configured origin by its host, worked out once per configuration (every request asks). */
const originsByHost = new WeakMap<Config, Map<string, string>>();

/** The configured origin served on `host`, if any (the configured spelling). */
function configuredOriginFor(config: Config, host: string): string | undefined {
  let byHost = originsByHost.get(config);
  if (!byHost) {
    byHost = new Map();
    // First configured wins, as the order of configuredOrigins says.
    for (const origin of configuredOrigins(config)) {
      const h = new URL(origin).host.toLowerCase();
      if (!byHost.has(h)) byHost.set(h, origin);
    }
    originsByHost.set(config, byHost);
  }
  return byHost.get(host);
}

export function requestOrigin(req: HostedRequest, config: Config): string {
  return configuredOriginFor(config, requestHost(req, config)) ?? config.baseUrl;
}

/**
 * True when `origin` (an Origin header value) is the origin this request arrived on. An origin is
 * scheme, host and port (RFC 6454 §4), so http://h and https://h are two origins (CONTRACT §4 "must come
 * from the same origin"). The scheme a host is served on is the configured one (a TLS proxy in front
 * makes the request itself plain HTTP); for a host that is not configured, the scheme the request came on.
 */
export function isSameOrigin(req: Request, config: Config, origin: string): boolean {
  try {
    const sent = new URL(origin);
    const host = requestHost(req, config);
    if (sent.host.toLowerCase() !== host) return false;
    const configured = configuredOriginFor(config, host);
    const scheme = configured ? new URL(configured).protocol : `${req.protocol}:`;
    return sent.protocol === scheme;
  } catch {
    return false;
  }
}
