import * as oauth from 'oauth4webapi';
import { CliError, EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { jsonText } from '../inert.js';
import { CLI_CLIENT, CLI_CLIENT_AUTH, discover, httpOptions, reach, serverOrigin } from '../server.js';
import { saveGrants, type TokenSet } from '../session.js';
import { pollUntilDone, showCode } from '../device-code.js';
import { loginWithBrowser } from './login-browser.js';
import { loginWithApiKey } from './login-api-key.js';
import { adoptOrg, describeEntry, storedSummary } from './whoami.js';
import { inertLine } from '../inert.js';

export interface LoginOptions {
  url?: string;
  browser?: boolean;
  apiKey?: boolean;
  org?: string;
  json?: boolean;
}

/**
 * `svc login`: the OAuth device grant (RFC 8628) for the built-in `svc-cli` client. One approval on the
 * device page yields the model and the platform grant (docs/oauth.md), stored with their refresh tokens.
 * `--browser` uses the authorization code flow instead; `--api-key` the /v1/auth/device flow.
 */
export async function login(io: IO, opts: LoginOptions): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  if (opts.apiKey) return loginWithApiKey(io, origin, opts);
  const as = await discover(origin);
  const entry = opts.browser ? await loginWithBrowser(io, origin, as) : await deviceGrant(io, origin, as);
  if (opts.org) await adoptOrg(io, origin, opts.org);
  // Who signed in, asked of the server; a server that cannot say (an old one) leaves the ids alone.
  const summary = await describeEntry(io, origin).catch(async () => storedSummary(io, origin));
  if (opts.json) line(io.stdout, jsonText(summary));
  else {
    // "Signed in to <server> as ada@example.com (Acme Research, owner)": a person, not ids.
    const who = inertLine(summary.email ?? summary.user ?? 'you');
    const where = [summary.org_name ?? summary.org, summary.role].filter(Boolean).map(inertLine).join(', ');
    line(io.stdout, `${io.color.green('Signed in')} to ${origin} as ${who}${where ? ` (${where})` : ''}.`);
  }
  return entry ? EXIT.ok : EXIT.failure;
}

async function deviceGrant(io: IO, origin: string, as: oauth.AuthorizationServer) {
  const http = httpOptions(origin);
  const response = await reach(origin, () =>
    oauth.deviceAuthorizationRequest(as, CLI_CLIENT, CLI_CLIENT_AUTH, {}, http),
  );
  const code = await oauth.processDeviceAuthorizationResponse(as, CLI_CLIENT, response);
  const stopWaiting = await showCode(io, code);
  const tokens = await pollUntilDone<TokenSet>(
    io,
    code.interval ?? 5,
    async () => {
      const res = await reach(origin, () =>
        oauth.deviceCodeGrantRequest(as, CLI_CLIENT, CLI_CLIENT_AUTH, code.device_code, http),
      );
      if (res.status === 503) return 'pending' as const; // temporarily_unavailable: keep the rhythm, ask again
      try {
        return await oauth.processDeviceCodeResponse(as, CLI_CLIENT, res);
      } catch (err) {
        if (!(err instanceof oauth.ResponseBodyError)) throw err;
        if (err.error === 'authorization_pending') return 'pending' as const;
        if (err.error === 'slow_down') return { slowDown: undefined };
        if (err.error === 'access_denied') {
          throw new CliError(
            EXIT.denied,
            'The sign-in was denied on the device page.',
            'Run `svc login` to try again.',
          );
        }
        if (err.error === 'expired_token') {
          throw new CliError(EXIT.auth, 'The code expired before it was approved.', 'Run `svc login` again.');
        }
        throw err;
      }
    },
    stopWaiting,
  );
  return saveGrants(io, origin, as.issuer, tokens);
}
