import { input, password } from '@inquirer/prompts';
import { CliError, EXIT } from './errors.js';
import { line, type IO } from './io.js';
import { inertLine } from './inert.js';
import { reach, serviceUnavailable } from './server.js';
import { callWithCredential, errorFor, errorOf, requireAccountCredential } from './api.js';
import { readEntry } from './credentials.js';

// A portal session for one command (docs/decisions/0060-terminal-key-list-needs-a-session.md): listing and
// revoking a person's keys are "S only" routes (CONTRACT §6), which take neither a grant nor a key. The
// person signs in at the terminal — e-mail, password without echo, and the 2FA code when the account has
// one (POST /v1/login, POST /v1/2fa/login, CONTRACT §4) —, the session token is held in memory for that
// one command and signed out after it (POST /v1/logout). It is never written anywhere, and the password is
// never read from the command line, where `ps` and shell history would keep it.

/** Wrong 2FA codes a person may type before the command gives up (the server burns a challenge at 5). */
const CODE_TRIES = 3;

export interface PasswordSession {
  origin: string;
  /** The session token: `Authorization: Bearer` on the S routes (CONTRACT §4). */
  token: string;
  email: string;
}

interface LoginAnswer {
  requires_2fa?: boolean;
  challenge_token?: string;
  session_token?: string;
  user?: { email?: string };
}

async function post(io: IO, origin: string, path: string, body: unknown, token?: string, signal = io.signal) {
  const res = await reach(origin, () =>
    fetch(`${origin}${path}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      body: JSON.stringify(body),
      signal,
    }),
  );
  const json = await res.json().catch((): unknown => ({}));
  return { res, json };
}

/** The e-mail to offer: the one this terminal's sign-in belongs to, when it can tell. */
async function knownEmail(io: IO, origin: string): Promise<string | undefined> {
  const entry = await readEntry(io.env, origin);
  if (entry?.api_key?.email) return entry.api_key.email;
  if (!entry?.grants?.model) return undefined;
  try {
    const credential = await requireAccountCredential(io, origin, 'who you are');
    const res = await callWithCredential(io, origin, '/v1/auth/verify', { method: 'GET' }, credential);
    return ((await res.json()) as { email?: string }).email;
  } catch {
    return undefined; // only a default for the prompt
  }
}

function refused(origin: string, res: Response, json: unknown): CliError {
  const { code } = errorOf(json);
  if (res.status === 503) return serviceUnavailable(origin, res.headers.get('retry-after'));
  if (code === 'INVALID_CREDENTIALS')
    return new CliError(
      EXIT.auth,
      'The e-mail address or the password is wrong.',
      `Try again; a forgotten password is reset on ${origin}/account/reset.`,
      'invalid_credentials',
    );
  return errorFor(origin, res.status, json, res.headers.get('retry-after'));
}

/** Asks for e-mail, password and (if needed) the 2FA code, and signs in. */
async function signIn(io: IO, origin: string, email: string | undefined): Promise<PasswordSession> {
  if (!io.stdinIsTTY) {
    throw new CliError(
      EXIT.usage,
      'This command signs in with your password, and asks for it at a terminal only.',
      'Run it at a terminal (the password is never taken from arguments or a pipe).',
    );
  }
  const ctx = { input: io.stdin, output: io.stderr, signal: io.signal };
  line(io.stderr, `Managing keys needs your password for ${origin} (the session ends with this command).`);
  const address =
    email ??
    (await input({ message: 'E-mail', default: await knownEmail(io, origin), required: true }, ctx)).trim();
  const secret = await password({ message: 'Password' }, ctx);
  const first = await post(io, origin, '/v1/login', { email: address, password: secret });
  if (!first.res.ok) throw refused(origin, first.res, first.json);
  let answer = first.json as LoginAnswer;
  for (let tries = 1; answer.requires_2fa; tries++) {
    const code = await input({ message: 'Two-factor code (or a recovery code)', required: true }, ctx);
    const second = await post(io, origin, '/v1/2fa/login', {
      challenge_token: answer.challenge_token,
      code: code.trim(),
    });
    if (second.res.ok) answer = second.json as LoginAnswer;
    else if (second.res.status === 401 && tries < CODE_TRIES) {
      line(io.stderr, io.color.yellow('That code was not accepted; try again.'));
    } else throw refused(origin, second.res, second.json);
  }
  if (!answer.session_token) throw new CliError(EXIT.failure, 'The server answered no session.');
  return { origin, token: answer.session_token, email: answer.user?.email ?? address };
}

/**
 * Runs `act` with a session made for it, and signs the session out after, whatever `act` did. A sign-out
 * that fails is said (the session then ends by itself within 12 hours, CONTRACT §4), never thrown over
 * the command's own answer.
 */
export async function withPasswordSession<T>(
  io: IO,
  origin: string,
  email: string | undefined,
  act: (session: PasswordSession) => Promise<T>,
): Promise<T> {
  const session = await signIn(io, origin, email);
  try {
    return await act(session);
  } finally {
    // Its own bound: after Ctrl-C the command's signal is aborted, and the session must still end.
    const out = await post(io, origin, '/v1/logout', {}, session.token, AbortSignal.timeout(10_000)).catch(
      () => undefined,
    );
    if (!out?.res.ok) {
      line(
        io.stderr,
        io.color.yellow(
          `The session for ${inertLine(session.email)} could not be signed out; it ends by itself within 12 hours.`,
        ),
      );
    }
  }
}
