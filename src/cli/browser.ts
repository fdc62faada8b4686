import open from 'open';
import { createInterface } from 'node:readline';
import { line, type IO } from './io.js';

// Opening a sign-in page in the person's browser: only when they press Enter at a terminal (a script or
// a CI log gets the address printed instead), and only an https address (or http on this machine), so
// a server cannot make the OS opener act on `file:` or a custom scheme.

const LOOPBACK = /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/;

/** The address, when it is one svc may hand to the OS opener. */
export function openable(raw: string): URL | undefined {
  try {
    const url = new URL(raw);
    if (url.protocol === 'https:' || (url.protocol === 'http:' && LOOPBACK.test(url.hostname))) return url;
  } catch {
    /* not a URL */
  }
  return undefined;
}

/** A person is at a terminal and no SVC_NO_BROWSER: pressing Enter may open the browser. */
export const canOpenBrowser = (io: IO) => io.isTTY && io.stdinIsTTY && !io.env.SVC_NO_BROWSER;

/** Opens the browser when the person presses Enter; answers a function that stops listening. */
export function openOnEnter(io: IO, url: string): () => void {
  const rl = createInterface({ input: io.stdin, terminal: false });
  rl.once('line', () => {
    void open(url)
      .then((child) => child.on('error', () => {}))
      .catch(() => {});
    line(io.stderr, io.color.dim('Opening your browser…'));
    rl.close();
  });
  return () => rl.close();
}
