import { CliError, EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { inertLine, jsonText } from '../inert.js';
import { reach, serviceUnavailable } from '../server.js';
import { readEntry, updateEntry } from '../credentials.js';
import { pollUntilDone, showCode, type ShownCode } from '../device-code.js';
import { errorFor } from '../api.js';
import { utcMinute } from '../table.js';

// `svc login --api-key`: the terminal device flow of /v1/auth/device/* (interface document, Device
// login; CONTRACT §6). It yields a durable svc_ token bound to the organization chosen on the device page,
// for scripts and CI. A new device login REPLACES this user's previous token in that organization
// (CONTRACT §6: "revokes the previous active one in the same transaction") — said before anything happens.

interface Poll {
  status: 'authorization_pending' | 'slow_down' | 'complete' | 'access_denied' | 'expired_token';
  interval?: number;
  token?: string;
  client_id?: string;
  email?: string;
}

export async function loginWithApiKey(
  io: IO,
  origin: string,
  opts: { org?: string; json?: boolean },
): Promise<number> {
  const c = io.color;
  line(
    io.stderr,
    c.yellow(
      'This creates an API key (svc_…) for scripts and CI. It replaces your previous API key in the ' +
        'organization you approve: anything still using that key stops working.',
    ),
  );
  await warnOfCurrentKey(io, origin);
  if (opts.org) line(io.stderr, `Choose ${inertLine(opts.org)} on the device page.`);
  const issued = await postJson<ShownCode & { device_code: string; interval: number }>(
    io,
    origin,
    '/v1/auth/device/code',
    {},
  );
  const stopWaiting = await showCode(io, issued);
  const done = await pollUntilDone<Poll>(
    io,
    issued.interval,
    async () => {
      const answer = await postJson<Poll>(
        io,
        origin,
        '/v1/auth/device/poll',
        { device_code: issued.device_code },
        [400],
      );
      switch (answer.status) {
        case 'authorization_pending':
          return 'pending' as const;
        case 'slow_down':
          return { slowDown: answer.interval };
        case 'complete':
          return answer;
        case 'access_denied':
          throw new CliError(
            EXIT.denied,
            'The sign-in was denied on the device page.',
            'Run `svc login --api-key` to try again.',
          );
        default:
          throw new CliError(
            EXIT.auth,
            'The code expired before it was approved.',
            'Run `svc login --api-key` again.',
          );
      }
    },
    stopWaiting,
  );
  const key = { token: done.token!, org: done.client_id!, email: done.email! };
  await updateEntry(io.env, origin, (old) => ({ ...old, api_key: key }));
  if (opts.org && opts.org.replace(/^client_/, 'org_') !== key.org) {
    line(io.stderr, c.yellow(`Note: the key was approved for ${key.org}, not ${opts.org}.`));
  }
  if (opts.json) {
    line(
      io.stdout,
      jsonText({ server: origin, email: key.email, org: key.org, replaced_previous_key: true }),
    );
  } else {
    line(io.stdout, `${c.green('Signed in')} to ${origin} as ${key.email} with an API key for ${key.org}.`);
    line(io.stdout, 'Your previous API key in that organization (if any) no longer works.');
  }
  return EXIT.ok;
}

async function postJson<T>(
  io: IO,
  origin: string,
  path: string,
  body: unknown,
  alsoOk: number[] = [],
): Promise<T> {
  const res = await reach(origin, () =>
    fetch(`${origin}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: io.signal,
    }),
  );
  const json = (await res.json().catch(() => ({}))) as T;
  if (res.ok || alsoOk.includes(res.status)) return json;
  if (res.status === 503) throw serviceUnavailable(origin, res.headers.get('retry-after'));
  throw errorFor(origin, res.status, json, res.headers.get('retry-after'));
}

/**
 * Before the code is shown, what an approval will replace (CONTRACT §6: one active key per organization
 * and person). svc keeps no place of use for a key, only when it was last used (to the minute), so the key
 * is named by name, prefix, organization and last use (docs/decisions/0105). The key this terminal holds
 * is read with the key itself (GET /v1/auth/verify); a key held elsewhere is on the list of `svc keys`,
 * which needs a session (docs/decisions/0060): this command does not ask for the password too.
 */
async function warnOfCurrentKey(io: IO, origin: string): Promise<void> {
  const key = (await readEntry(io.env, origin))?.api_key;
  const elsewhere =
    'A key of yours used on another machine is replaced the same way: `svc keys` lists your keys with their last use first.';
  if (!key) return line(io.stderr, io.color.yellow(elsewhere));
  const res = await reach(origin, () =>
    fetch(`${origin}/v1/auth/verify`, {
      headers: { authorization: `Bearer ${key.token}` },
      signal: io.signal,
    }),
  );
  if (!res.ok) {
    await res.body?.cancel();
    return line(io.stderr, io.color.yellow(elsewhere));
  }
  const v = (await res.json()) as { token_name?: string; client_id?: string; last_used_at?: number | null };
  const used = v.last_used_at ? `last used ${utcMinute(v.last_used_at)}` : 'never used';
  line(
    io.stderr,
    io.color.yellow(
      `Your current API key "${inertLine(v.token_name ?? '')}" (${inertLine(tokenPrefix(key.token))}…) for ${inertLine(v.client_id ?? key.org)} (${used}) stops working if you approve that organization again.`,
    ),
  );
}

/** What lists show of a secret (CONTRACT §6 `token_prefix`): `svc_` and four more characters. */
const tokenPrefix = (secret: string) => secret.slice(0, 8);
