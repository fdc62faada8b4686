import { lookup } from 'node:dns';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { Agent, buildConnector } from 'undici';

// The SSRF guard of every request svc makes to a URL someone else chose (a client ID metadata document:
// oauth/client-metadata.ts; an owner's webhook endpoint: src/events/delivery.ts). The address actually
// dialled is checked at connect time: an address literal as it is, a name against every address it
// resolves to, so DNS rebinding cannot slip past a check made earlier.
//
// Which addresses are public is not our own table: ipaddr.js keeps the IANA special-purpose registries
// (RFC 6890 and their later additions) as named ranges, and only its `unicast` range — what no registry
// entry claims — may be reached. That refuses, besides the private, loopback and link-local ranges, every
// form that embeds or translates another address (IPv4-mapped and IPv4-compatible `::/96`, 6to4
// `2002::/16`, Teredo `2001::/32`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, the 6to4 relay
// `192.88.99.0/24`), discard `100::/64`, documentation, benchmarking and reserved space. IPv6 must also lie
// in `2000::/3`, the only block IANA allocates as global unicast (docs/limits.md § Outbound requests).

const GLOBAL_UNICAST_V6 = ipaddr.parseCIDR('2000::/3');

/** True for an address no outbound request may reach (and for anything that is not an address). */
export function isForbiddenAddress(address: string): boolean {
  if (!isIP(address)) return true;
  const parsed = ipaddr.parse(address);
  if (parsed.range() !== 'unicast') return true;
  return parsed.kind() === 'ipv6' && !parsed.match(GLOBAL_UNICAST_V6);
}

export const isLoopback = (address: string): boolean =>
  address === '::1' || address.startsWith('127.') || address === '::ffff:127.0.0.1';

/** A URL's host as an address when it is one (brackets of an IPv6 literal removed), else null. */
export function literalAddress(url: URL): string | null {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return isIP(host) ? host : null;
}

/**
 * The error of a connection the guard refused: an address that is not public, or a name with no public
 * address (it resolves to none, or to a non-public one). Both are one failure so that what an owner
 * reads (a webhook delivery's `last_error`) cannot tell a resolvable internal name from an unknown one.
 */
export const NOT_PUBLIC = 'ERR_SVC_NOT_PUBLIC_ADDRESS';
const notPublic = (): Error =>
  Object.assign(new Error('refused: not a public address'), { code: NOT_PUBLIC });

/** True when `err` (or the cause fetch wraps it in) is the guard's refusal. */
export function isGuardRefusal(err: unknown): boolean {
  const e = err as { code?: string; cause?: { code?: string } } | undefined;
  return e?.code === NOT_PUBLIC || e?.cause?.code === NOT_PUBLIC;
}

/**
 * An undici dispatcher whose every connection is checked: an address literal before it is dialled (Node
 * skips DNS for those), a name after DNS, on the addresses actually dialled. `allow` lets some forbidden
 * addresses through (loopback for a DEV_MODE metadata document; everything for a DEV_MODE webhook
 * endpoint). Connecting is bounded by `connectTimeoutMs`.
 */
export function guardedAgent(options: {
  connectTimeoutMs: number;
  allow?: (address: string) => boolean;
}): Agent {
  const allow = options.allow ?? (() => false);
  const refused = (address: string) => isForbiddenAddress(address) && !allow(address);
  const connector = buildConnector({
    timeout: options.connectTimeoutMs,
    lookup(hostname, lookupOptions, callback) {
      lookup(hostname, { ...lookupOptions, all: true }, (err, addresses) => {
        if (err) return callback(notPublic(), '', 4);
        const list = addresses as unknown as { address: string; family: number }[];
        if (list.length === 0 || list.some((a) => refused(a.address))) return callback(notPublic(), '', 4);
        if ((lookupOptions as { all?: boolean }).all)
          return (callback as unknown as (e: null, a: typeof list) => void)(null, list);
        callback(null, list[0]!.address, list[0]!.family);
      });
    },
  });
  return new Agent({
    connect(connectOptions, callback) {
      const host = connectOptions.hostname.replace(/^\[|\]$/g, '');
      if (isIP(host) && refused(host)) return callback(notPublic(), null);
      return connector(connectOptions, callback);
    },
  });
}
