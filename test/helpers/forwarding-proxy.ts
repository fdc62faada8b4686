import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

// A reverse proxy in a process of its own (test/helpers/forwarding-proxy-main.ts), for TRUST_PROXY
// tests: the server sees a real peer at the proxy's address and the X-Forwarded-For it appended.

export interface ForwardingProxy {
  /** Where clients connect: http://127.0.0.1:<port>. */
  url: string;
  close(): Promise<void>;
}

const MAIN = fileURLToPath(new URL('./forwarding-proxy-main.ts', import.meta.url));

export async function startForwardingProxy(options: {
  /** The upstream, e.g. the test server's url or another proxy's. */
  target: string;
  /** The loopback address the proxy connects upstream from (the address the server must trust). */
  localAddress: string;
  /** Keep an X-Forwarded-Host set by a proxy in front of this one. */
  keepForwardedHost?: boolean;
}): Promise<ForwardingProxy> {
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN], {
    env: {
      ...process.env,
      PROXY_TARGET: options.target,
      PROXY_LOCAL_ADDRESS: options.localAddress,
      PROXY_KEEP_FORWARDED_HOST: options.keepForwardedHost ? '1' : '0',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (c: Buffer) => (err += c.toString('utf8')));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const { port } = await new Promise<{ port: number }>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString('utf8');
      const nl = out.indexOf('\n');
      if (nl >= 0) resolve(JSON.parse(out.slice(0, nl)) as { port: number });
    });
    child.once('exit', (code) => reject(new Error(`proxy exited (${code}) before it started:\n${err}`)));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    async close() {
      if (child.exitCode === null) child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 3_000);
      await exited;
      clearTimeout(killer);
    },
  };
}
