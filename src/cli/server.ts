import * as oauth from 'oauth4webapi';
import { CliError, EXIT } from './errors.js';

// The server a command talks to: `--url`, else SVC_URL, else http://localhost:8080 (the embedded server's
// default). Everything else — endpoints, issuer, keys — is discovered from its metadata (RFC 8414).

export const DEFAULT_URL = 'http://localhost:8080';
/** The built-in public client (docs/oauth.md, Clients). */
export const CLI_CLIENT: oauth.Client = { client_id: 'svc-cli' };
export const CLI_CLIENT_AUTH = oauth.None();

const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/;

export function serverOrigin(option: string | undefined, env: NodeJS.ProcessEnv): string {
  const raw = option ?? env.SVC_URL ?? DEFAULT_URL;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new CliError(EXIT.usage, `"${raw}" is not a URL.`, 'Pass the server as --url https://host.');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new CliError(
      EXIT.usage,
      `"${raw}" is not an http(s) URL.`,
      'Pass the server as --url https://host.',
    );
  }
  // Bearer tokens over plain HTTP are readable by anyone on the path: allowed to this machine only.
  if (url.protocol === 'http:' && !LOOPBACK.test(url.hostname)) {
    throw new CliError(
      EXIT.usage,
      `Refusing to send credentials to ${url.origin} over plain HTTP.`,
      'Use the server’s https:// address.',
    );
  }
  return url.origin;
}

/** oauth4webapi refuses http:// unless told; serverOrigin has already limited http to loopback. */
export const httpOptions = (origin: string) =>
  origin.startsWith('http:') ? { [oauth.allowInsecureRequests]: true } : {};

/** fetch that turns "could not connect" into a message with the next step. */
export async function reach(origin: string, run: () => Promise<Response>): Promise<Response> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof TypeError || (err as { name?: string }).name === 'TypeError') {
      throw unreachable(origin);
    }
    throw err;
  }
}

export const unreachable = (origin: string) =>
  new CliError(
    EXIT.unavailable,
    `Cannot reach the server at ${origin}.`,
    'Check that it is running (`npm start`) and the address (--url or SVC_URL).',
    'unreachable',
  );

const discovered = new Map<string, oauth.AuthorizationServer>();

/**
 * The authorization server's metadata. The issuer must be byte-identical to the origin asked (RFC 8414
 * §3.3): a proxy or a server configured for another address would otherwise get tokens meant for
 * another issuer — svc refuses before sending anything.
 */
export async function discover(origin: string): Promise<oauth.AuthorizationServer> {
  const cached = discovered.get(origin);
  if (cached) return cached;
  const issuer = new URL(origin);
  const response = await reach(origin, () =>
    oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...httpOptions(origin) }),
  );
  if (response.status === 503) throw serviceUnavailable(origin);
  try {
    const as = await oauth.processDiscoveryResponse(issuer, response);
    discovered.set(origin, as);
    return as;
  } catch (err) {
    if (err instanceof oauth.OperationProcessingError && err.code === oauth.JSON_ATTRIBUTE_COMPARISON) {
      throw new CliError(
        EXIT.untrusted,
        `The server at ${origin} says it is a different issuer, so svc will not sign in there.`,
        'Use the address the server is configured with (its BASE_URL / V2_URL), or fix its configuration.',
        'issuer_mismatch',
      );
    }
    throw new CliError(
      EXIT.failure,
      `${origin} did not answer like an svc server (${(err as Error).message}).`,
      'Check the address (--url or SVC_URL).',
    );
  }
}

export const serviceUnavailable = (origin: string, retryAfter?: string | null) =>
  new CliError(
    EXIT.unavailable,
    `The server at ${origin} is temporarily unavailable.`,
    `Try again ${retryAfter ? `in ${retryAfter} s` : 'in a moment'}.`,
    'unavailable',
  );
