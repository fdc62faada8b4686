import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

// A TCP proxy of the test's own between svc and PostgreSQL, for fault injection (STYLE: Faults): svc is
// pointed at it (DATABASE_URL with the proxy's port) and the test breaks the path for real.
//   cut()        every open connection is reset (RST) and new ones are refused: the database is gone
//   blackHole()  bytes stop flowing both ways and new connections are accepted but never answered
//   latencyMs    every chunk is delayed this long, both ways
//   heal()       back to a plain pipe (connections cut before stay cut; a black hole's resume)

export interface TcpProxy {
  port: number;
  /** `databaseUrl` with its host and port replaced by the proxy's. */
  urlFor(databaseUrl: string): string;
  latencyMs: number;
  cut(): void;
  blackHole(): void;
  heal(): void;
  /** Connections currently open through the proxy. */
  open(): number;
  close(): Promise<void>;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  let mode: 'pass' | 'refuse' | 'black-hole' = 'pass';
  const pairs = new Set<{ client: Socket; server: Socket | null; held: (() => void)[] }>();

  const server: Server = createServer((client) => {
    client.on('error', () => {});
    if (mode === 'refuse') {
      client.resetAndDestroy();
      return;
    }
    const pair = { client, server: null as Socket | null, held: [] as (() => void)[] };
    pairs.add(pair);
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      pair.server?.destroy();
    };
    client.on('close', end);
    const open = () => {
      const upstream = connect(target.port, target.host);
      pair.server = upstream;
      upstream.on('error', end);
      upstream.on('close', end);
      relay(client, upstream, pair.held);
      relay(upstream, client, pair.held);
    };
    // A connection made into a black hole reaches the database only once the hole closes.
    if (mode === 'black-hole') pair.held.push(open);
    else open();
  });

  /** Forwards `from` to `to`, delayed by the latency, or held back while the proxy is a black hole. */
  function relay(from: Socket, to: Socket, held: (() => void)[]) {
    from.on('data', (chunk: Buffer) => {
      const send = () => {
        if (!to.destroyed) to.write(chunk);
      };
      // The scenario knob: a network with this latency.
      const deliver = () => (proxy.latencyMs > 0 ? setTimeout(send, proxy.latencyMs) : send());
      // Held in order, as a network that drops and retransmits would deliver once it is back.
      if (mode === 'black-hole') held.push(deliver);
      else deliver();
    });
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;

  const proxy: TcpProxy = {
    port,
    latencyMs: 0,
    urlFor(databaseUrl) {
      const url = new URL(databaseUrl);
      url.hostname = '127.0.0.1';
      url.port = String(port);
      return url.toString();
    },
    cut() {
      mode = 'refuse';
      for (const { client, server: upstream } of [...pairs]) {
        client.resetAndDestroy();
        upstream?.destroy();
      }
      pairs.clear();
    },
    blackHole() {
      mode = 'black-hole';
    },
    heal() {
      mode = 'pass';
      for (const pair of pairs) for (const run of pair.held.splice(0)) run();
    },
    open: () => pairs.size,
    close: () =>
      new Promise<void>((resolve) => {
        proxy.cut();
        server.close(() => resolve());
      }),
  };
  return proxy;
}
