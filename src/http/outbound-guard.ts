import { lookup } from 'node:dns';
import { BlockList, isIP } from 'node:net';
import { Agent } from 'undici';

// The SSRF guard of every request svc makes to a URL someone else chose (a client ID metadata document:
// oauth/client-metadata.ts; an owner's webhook endpoint: src/events/delivery.ts). Every address a name
// resolves to is checked at connect time, against the private, loopback, link-local and other
// special-purpose ranges (RFC 6890), so DNS rebinding cannot slip past a check made earlier.

/** Address ranges an outbound request may never reach (RFC 6890 special-purpose registries). */
const blocked = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const)
  blocked.addSubnet(net, prefix, 'ipv4');
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
  ['64:ff9b::', 96],
  ['2001:db8::', 32],
] as const)
  blocked.addSubnet(net, prefix, 'ipv6');

/** True for an address no outbound request may reach (and for anything that is not an address). */
export function isForbiddenAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return true;
  if (family === 6 && address.toLowerCase().startsWith('::ffff:'))
    return isForbiddenAddress(address.slice(7));
  return blocked.check(address, family === 4 ? 'ipv4' : 'ipv6');
}

export const isLoopback = (address: string): boolean =>
  address === '::1' || address.startsWith('127.') || address === '::ffff:127.0.0.1';

/** A URL's host as an address when it is one (brackets of an IPv6 literal removed), else null. */
export function literalAddress(url: URL): string | null {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return isIP(host) ? host : null;
}

/**
 * An undici dispatcher whose every connection is checked after DNS: the address actually dialled is the
 * one checked. `allow` lets some forbidden addresses through (loopback for a DEV_MODE metadata document;
 * everything for a DEV_MODE webhook endpoint). Connecting is bounded by `connectTimeoutMs`.
 */
export function guardedAgent(options: {
  connectTimeoutMs: number;
  allow?: (address: string) => boolean;
}): Agent {
  const allow = options.allow ?? (() => false);
  return new Agent({
    connect: {
      timeout: options.connectTimeoutMs,
      lookup(hostname, lookupOptions, callback) {
        lookup(hostname, { ...lookupOptions, all: true }, (err, addresses) => {
          if (err) return callback(err, '', 4);
          const list = addresses as unknown as { address: string; family: number }[];
          const bad = list.find((a) => isForbiddenAddress(a.address) && !allow(a.address));
          if (bad || list.length === 0)
            return callback(new Error(`refusing to connect to ${bad?.address ?? hostname}`), '', 4);
          if ((lookupOptions as { all?: boolean }).all)
            return (callback as unknown as (e: null, a: typeof list) => void)(null, list);
          callback(null, list[0]!.address, list[0]!.family);
        });
      },
    },
  });
}
