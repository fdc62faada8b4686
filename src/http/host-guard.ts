import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Config } from '../config.js';
import { AppError, COMMON_ERRORS, errorOf } from './errors.js';
import { renderError, surfaceOfPath } from './error-middleware.js';
import { configuredOrigins, requestHost, type HostedRequest } from './origin.js';

// In dev mode the server answers only the Host names of its own origins and loopback (CONTRACT §1). A
// DNS-rebinding page (evil.example first resolving to its own server, then to 127.0.0.1) makes the
// victim's browser send same-origin requests to this server, with `Host: evil.example`; dev mode has
// /dev/mail, where anyone's reset link can be read. The browser always sends the name it resolved, so
// refusing names we do not serve closes that door. Production has no /dev/*, and its origins sit behind
// a proxy that routes by name, so the guard runs in dev mode only (docs/deploying.md § Dev mode).

/** `name` or `[v6]`, then an optional port: the only Host spellings a browser sends. */
const HOST = /^(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::\d{1,5})?$/;
const LOOPBACK_V4 = /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;

/** Loopback names a DNS answer cannot give to an attacker (RFC 6761 §6.3: browsers keep `localhost` local). */
const isLoopbackName = (name: string): boolean =>
  name === 'localhost' || name.endsWith('.localhost') || name === '[::1]' || LOOPBACK_V4.test(name);

const namesByConfig = new WeakMap<Config, Set<string>>();

function ownNames(config: Config): Set<string> {
  let names = namesByConfig.get(config);
  if (!names) {
    names = new Set(configuredOrigins(config).map((o) => new URL(o).hostname.toLowerCase()));
    namesByConfig.set(config, names);
  }
  return names;
}

/** True when the request's Host (a trusted proxy's X-Forwarded-Host) names one of our origins or loopback. */
export function hostAllowed(req: HostedRequest, config: Config): boolean {
  const name = HOST.exec(requestHost(req, config))?.[1];
  return name !== undefined && (ownNames(config).has(name) || isLoopbackName(name));
}

function foreignHost(req: HostedRequest, config: Config): AppError {
  const host = requestHost(req, config).slice(0, 100);
  return errorOf(
    COMMON_ERRORS,
    'MISDIRECTED_REQUEST',
    `this dev-mode server does not answer for Host '${host}' (DNS-rebinding guard): use one of its ` +
      'origins (BASE_URL, V2_URL, LIGHT_URL) or a loopback name, or add the name as one of those origins',
  );
}

/**
 * The guard as a request step (Express, and the chat call's own entry): refuses in the surface's shape
 * through the error handling of its caller. Undefined outside dev mode (no step at all).
 */
export function devHostGuard(
  config: Config,
): ((req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void) | undefined {
  if (!config.devMode) return undefined;
  return (req, _res, next) => next(hostAllowed(req, config) ? undefined : foreignHost(req, config));
}

/** For an upgrade (the run socket), which has no response to render into: the raw HTTP refusal. */
export function refuseForeignUpgrade(req: IncomingMessage, socket: NodeJS.WritableStream, config: Config) {
  const path = (req.url ?? '/').split('?')[0] ?? '/';
  const body = JSON.stringify(renderError(foreignHost(req, config), surfaceOfPath(path)));
  socket.end(
    'HTTP/1.1 421 Misdirected Request\r\nConnection: close\r\nContent-Type: application/json; charset=utf-8\r\n' +
      `X-Content-Type-Options: nosniff\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}
