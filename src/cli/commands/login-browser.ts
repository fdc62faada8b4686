import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as oauth from 'oauth4webapi';
import { CliError, EXIT } from '../errors.js';
import { inertLine } from '../inert.js';
import { line, type IO } from '../io.js';
import { CLI_CLIENT, CLI_CLIENT_AUTH, httpOptions, reach } from '../server.js';
import { saveGrants, type TokenSet } from '../session.js';
import { canOpenBrowser, openOnEnter } from '../browser.js';

// `svc login --browser`: authorization code + PKCE S256 with a loopback redirect (RFC 8252 §7.3): a
// one-shot listener on 127.0.0.1 at a port the system picks; svc-cli's registered loopback redirect
// accepts any port. The browser is opened with `open` when a person is at a terminal; otherwise (or
// when SVC_NO_BROWSER is set) the URL is printed for them to open.

/** How long to wait for the browser to come back. */
const CALLBACK_TIMEOUT_MS = 5 * 60_000;

const page = (title: string, text: string) =>
  `<!doctype html><html lang="en"><meta charset="utf-8"><title>${title}</title>` +
  `<body style="font-family:system-ui;max-width:32rem;margin:4rem auto"><h1>${title}</h1><p>${text}</p></body></html>`;

export async function loginWithBrowser(io: IO, origin: string, as: oauth.AuthorizationServer) {
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const { server, redirectUri, callback } = await listenForCallback(io);
  try {
    const url = openableEndpoint(as);
    url.search = new URLSearchParams({
      response_type: 'code',
      client_id: CLI_CLIENT.client_id,
      redirect_uri: redirectUri,
      state,
      code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
    }).toString();

    const canOpen = canOpenBrowser(io);
    line(
      io.stderr,
      canOpen ? 'Press Enter to open your browser, or open this address yourself:' : 'To sign in, open:',
    );
    line(io.stderr, inertLine(url.toString()));
    line(io.stderr, io.color.dim('Waiting for the browser… (Ctrl-C to stop)'));
    const stopWaitingForEnter = canOpen ? openOnEnter(io, url.toString()) : () => {};
    void callback.finally(stopWaitingForEnter).catch(() => {});

    const returned = await callback;
    // Checks state and, since the server sets authorization_response_iss_parameter_supported, that `iss`
    // is the discovered issuer (RFC 9207, mix-up defence). An `error` in the redirect throws.
    let params: URLSearchParams;
    try {
      params = oauth.validateAuthResponse(as, CLI_CLIENT, returned.url, state);
    } catch (err) {
      returned.answer(400, page('Sign-in failed', 'Return to your terminal.'));
      if (err instanceof oauth.AuthorizationResponseError && err.error === 'access_denied') {
        throw new CliError(
          EXIT.denied,
          'The sign-in was denied in the browser.',
          'Run `svc login --browser` to try again.',
        );
      }
      throw new CliError(
        EXIT.auth,
        `The browser came back with an unusable answer (${(err as Error).message}).`,
        'Run `svc login --browser` again.',
      );
    }
    const response = await reach(origin, () =>
      oauth.authorizationCodeGrantRequest(
        as,
        CLI_CLIENT,
        CLI_CLIENT_AUTH,
        params,
        redirectUri,
        verifier,
        httpOptions(origin),
      ),
    );
    const tokens = (await oauth.processAuthorizationCodeResponse(as, CLI_CLIENT, response)) as TokenSet;
    returned.answer(200, page('Signed in', 'You can close this tab and return to your terminal.'));
    return saveGrants(io, origin, as.issuer, tokens);
  } finally {
    server.close();
    server.closeAllConnections();
  }
}

/**
 * The authorization endpoint, if svc may open it: only `https:` (or `http:` on this machine) on the
 * issuer's own origin. A server's metadata could name any scheme (`file:`, a custom handler) or another
 * site, and the OS opener would act on it; anything else is refused with the address named.
 */
export function openableEndpoint(as: oauth.AuthorizationServer): URL {
  const raw = String(as.authorization_endpoint ?? '');
  let url: URL | undefined;
  try {
    url = new URL(raw);
  } catch {
    url = undefined;
  }
  const issuer = new URL(as.issuer);
  const loopback = url && /^(localhost|127(\.\d{1,3}){3}|\[::1\])$/.test(url.hostname);
  const schemeOk = url && (url.protocol === 'https:' || (url.protocol === 'http:' && loopback));
  if (!url || !schemeOk || url.origin !== issuer.origin) {
    throw new CliError(
      EXIT.untrusted,
      `The server names "${inertLine(raw)}" as its sign-in page; svc opens only an https address on the server's own origin (${issuer.origin}), so it did not open it.`,
      'Use `svc login` (the device code) instead, and tell the server’s operator.',
      'unsafe_authorization_endpoint',
    );
  }
  return url;
}

interface Returned {
  url: URL;
  answer(status: number, html: string): void;
}

async function listenForCallback(
  io: IO,
): Promise<{ server: Server; redirectUri: string; callback: Promise<Returned> }> {
  let deliver!: (r: Returned) => void;
  let fail!: (e: Error) => void;
  const callback = new Promise<Returned>((resolve, reject) => {
    deliver = resolve;
    fail = reject;
  });
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', `http://${req.headers.host}`);
    if (url.pathname !== '/callback') {
      res.writeHead(404).end();
      return;
    }
    deliver({
      url,
      answer: (status, html) =>
        res.writeHead(status, { 'content-type': 'text/html; charset=utf-8' }).end(html),
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const timer = setTimeout(
    () =>
      fail(
        new CliError(
          EXIT.auth,
          'No answer from the browser in 5 minutes.',
          'Run `svc login --browser` again.',
        ),
      ),
    CALLBACK_TIMEOUT_MS,
  );
  timer.unref();
  io.signal.addEventListener('abort', () => fail(new CliError(EXIT.interrupted, 'Sign-in stopped.')), {
    once: true,
  });
  void callback.finally(() => clearTimeout(timer)).catch(() => {});
  return { server, redirectUri: `http://127.0.0.1:${port}/callback`, callback };
}
