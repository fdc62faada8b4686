import type { IncomingMessage } from 'node:http';
import proxyaddr from 'proxy-addr';
import type { Config } from '../config.js';

// The client's address behind TRUST_PROXY (CONTRACT §1): the right-most address in X-Forwarded-For that
// is not a trusted proxy. Every proxy appends the address it was connected from, so walking right to
// left from the socket's peer, each trusted hop vouches for the next; the first address no trusted hop
// stands behind is the client. Whatever a client writes into the header itself sits left of that and is
// never read. proxy-addr (Express's own) does the walk; this file gives Express and the plain node
// entry of chat calls (src/models/entry.ts) one function, so rate limits and logs agree.

type Trust = (address: string, hop: number) => boolean;
/** The one setting read here (the rate limiter is given a slice of the configuration). */
type Proxies = Pick<Config, 'trustProxy'>;

const NOBODY: Trust = () => false;
const trustByConfig = new WeakMap<Proxies, Trust>();

/**
 * Whether the peer `hop` steps from us is a proxy to believe: hop 0 is the socket's peer, hop 1 the
 * right-most X-Forwarded-For entry, and so on. A hop count trusts the first `hops` peers whatever their
 * addresses (it assumes every request comes through all of them); an address list trusts exactly those.
 */
export function trustFunction(config: Proxies): Trust {
  let trust = trustByConfig.get(config);
  if (!trust) {
    const t = config.trustProxy;
    trust = !t ? NOBODY : 'hops' in t ? (_address, hop) => hop < t.hops : proxyaddr.compile(t.addresses);
    trustByConfig.set(config, trust);
  }
  return trust;
}

/** The address rate limits are keyed on and request logs show. */
export function clientAddress(req: IncomingMessage, config: Proxies): string {
  const peer = req.socket.remoteAddress;
  if (!config.trustProxy || !peer) return peer ?? 'unknown';
  return proxyaddr(req, trustFunction(config));
}

/** True when the socket's peer is a trusted proxy: only then are its X-Forwarded-* headers read. */
export function fromTrustedProxy(req: Pick<IncomingMessage, 'socket'>, config: Proxies): boolean {
  const peer = req.socket?.remoteAddress;
  return Boolean(config.trustProxy && peer && trustFunction(config)(peer, 0));
}
