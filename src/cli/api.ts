import { setTimeout as sleep } from 'node:timers/promises';
import { CliError, EXIT, notSignedIn, signInAgain } from './errors.js';
import type { IO } from './io.js';
import { reach, serviceUnavailable } from './server.js';
import { actingOrg, grantToken, signedInEntry } from './session.js';
import { paymentRefused } from './refusals.js';

// HTTP calls to svc's /v1 with the stored credential, and the answers a person understands: every
// failure says what happened and what to do next.

/** 429 concurrency_limit: how often to wait Retry-After and try again, and the longest single wait. */
export const MAX_BUSY_RETRIES = 3;
const MAX_RETRY_WAIT_SECONDS = 30;

export interface Credential {
  kind: 'grant' | 'api_key';
  token: string;
  /** x-svc-organisation to send (`svc orgs use`); never with an svc_ key, which is bound to its org. */
  org?: string;
}

/** The credential for model routes and runs: the model grant, else the svc_ key of `login --api-key`. */
export async function modelCredential(io: IO, origin: string, forceRefresh = false): Promise<Credential> {
  const entry = await signedInEntry(io, origin);
  if (entry.grants?.model) {
    const token = await grantToken(io, origin, 'model', forceRefresh);
    return { kind: 'grant', token, ...(entry.default_org ? { org: entry.default_org } : {}) };
  }
  if (entry.api_key) return { kind: 'api_key', token: entry.api_key.token };
  throw notSignedIn(origin);
}

/**
 * The credential for the account routes (clients, balances, usage): the model grant when it carries
 * scope `account` (CONTRACT §7: one sign-in reads them too), else the svc_ key of `login --api-key`.
 */
export async function accountCredential(io: IO, origin: string): Promise<Credential | undefined> {
  const entry = await signedInEntry(io, origin);
  if (entry.grants?.model?.scope.split(' ').includes('account'))
    return { kind: 'grant', token: await grantToken(io, origin, 'model') };
  if (entry.api_key) return { kind: 'api_key', token: entry.api_key.token };
  return undefined;
}

/** The credential for an account read, or an error saying that this sign-in predates scope `account`. */
export async function requireAccountCredential(io: IO, origin: string, reading: string): Promise<Credential> {
  const credential = await accountCredential(io, origin);
  if (credential) return credential;
  throw new CliError(
    EXIT.auth,
    `This sign-in cannot read ${reading} (it was made before svc-cli asked for the account scope).`,
    `Run \`svc login --url ${origin}\` again.`,
  );
}

/** The svc_ key, for the account routes that take S|B (clients, balances). */
export async function apiKey(io: IO, origin: string): Promise<string | undefined> {
  return (await signedInEntry(io, origin)).api_key?.token;
}

export function authHeaders(credential: Credential): Record<string, string> {
  return {
    authorization: `Bearer ${credential.token}`,
    ...(credential.org ? { 'x-svc-organisation': credential.org } : {}),
  };
}

interface ErrorBody {
  error?: { code?: string; message?: string } | string;
  error_description?: string;
  detail?: { code?: string; message?: string };
}

/** Reads the error code and message from any of svc's error shapes (OpenAI, /v1 detail, RFC 6749). */
export function errorOf(body: unknown): { code: string; message: string } {
  const b = (body ?? {}) as ErrorBody;
  if (typeof b.error === 'object' && b.error)
    return { code: b.error.code ?? '', message: b.error.message ?? '' };
  if (b.detail) return { code: b.detail.code ?? '', message: b.detail.message ?? '' };
  if (typeof b.error === 'string') return { code: b.error, message: b.error_description ?? '' };
  return { code: '', message: '' };
}

/** The person-facing error for a failed answer. */
export function errorFor(
  origin: string,
  status: number,
  body: unknown,
  retryAfter?: string | null,
): CliError {
  const { code, message } = errorOf(body);
  const lower = code.toLowerCase();
  if (status === 401) return signInAgain(origin);
  if (status === 402 || lower === 'insufficient_credits') {
    // Said in full by explainRefusal (it reads the account routes); this is what is known without them.
    return new CliError(
      EXIT.denied,
      lower === 'member_budget_exhausted'
        ? 'Your token budget in this organization for this period is used; ask the owner.'
        : 'This organization has not enough tokens left for this call.',
      `Top up on ${origin}/account (the owner), or ask its owner to allocate more; \`svc balance\` shows what is left.`,
      lower || 'insufficient_credits',
    );
  }
  if (lower === 'viewer_cannot_spend') {
    return new CliError(
      EXIT.denied,
      'You are a viewer in this organization, and viewers cannot spend its credits.',
      'Ask an owner to make you a member, or act for another organization: `svc orgs use ORG`.',
      'viewer_cannot_spend',
    );
  }
  if (status === 403) {
    return new CliError(
      EXIT.denied,
      `The server refused: ${message || code || 'forbidden'}.`,
      'Check the organization you act for (`svc whoami`, `svc orgs use ORG`).',
      lower || 'forbidden',
    );
  }
  if (status === 429 && lower === 'rate_limit_exceeded') {
    return new CliError(
      EXIT.unavailable,
      'The rate limit of this organization or credential is reached (calls or tokens a minute).',
      `Try again ${retryAfter ? `in ${retryAfter} s` : 'in a minute'}.`,
      'rate_limit_exceeded',
    );
  }
  if (status === 429 && lower === 'rate_limited') {
    return new CliError(
      EXIT.unavailable,
      'Too many requests from this address.',
      `Try again ${retryAfter ? `in ${retryAfter} s` : 'in a minute'}.`,
      'rate_limited',
    );
  }
  if (status === 429) {
    return new CliError(
      EXIT.unavailable,
      'This organization has too many calls in flight; still busy after waiting.',
      `Try again ${retryAfter ? `in ${retryAfter} s` : 'shortly'}, or wait for other calls and runs to finish.`,
      lower || 'concurrency_limit',
    );
  }
  if (status === 503) return serviceUnavailable(origin, retryAfter);
  return new CliError(
    status >= 500 ? EXIT.failure : EXIT.usage,
    `The server answered ${status}${message ? `: ${message}` : code ? `: ${code}` : ''}.`,
    status >= 500 ? 'Try again; if it persists, tell the server’s operator.' : undefined,
    lower || undefined,
  );
}

async function bodyOf(res: Response): Promise<unknown> {
  try {
    return await res.json();
  } catch {
    return {};
  }
}

/**
 * One call with a credential: a grant answered 401 is refreshed once and the call repeated (the access
 * token may have expired in flight); 429 waits Retry-After and retries at most MAX_BUSY_RETRIES times.
 * Answers 2xx, or throws the person-facing error.
 */
export async function callWithCredential(
  io: IO,
  origin: string,
  path: string,
  init: RequestInit,
  credential: Credential,
): Promise<Response> {
  let refreshed = false;
  for (let attempt = 0; ; attempt++) {
    const headers = { ...(init.headers as Record<string, string>), ...authHeaders(credential) };
    const res = await reach(origin, () => fetch(`${origin}${path}`, { ...init, headers, signal: io.signal }));
    if (res.ok) return res;
    if (res.status === 401 && credential.kind === 'grant' && !refreshed) {
      await res.body?.cancel();
      refreshed = true;
      credential = await modelCredential(io, origin, true);
      continue;
    }
    const retryAfter = res.headers.get('retry-after');
    const body = await bodyOf(res);
    if (
      res.status === 429 &&
      errorOf(body).code.toLowerCase() === 'concurrency_limit' &&
      attempt < MAX_BUSY_RETRIES
    ) {
      const wait = Math.min(Math.max(Number(retryAfter) || 1, 1), MAX_RETRY_WAIT_SECONDS);
      io.stderr.write(
        io.color.yellow(
          `Busy: too many calls in flight for this organization; retrying in ${wait} s (${attempt + 1}/${MAX_BUSY_RETRIES})\n`,
        ),
      );
      await sleep(wait * 1000, undefined, { signal: io.signal });
      continue;
    }
    if (res.status === 402) throw await explainRefusal(io, origin, credential, body);
    throw errorFor(origin, res.status, body, retryAfter);
  }
}

/**
 * A 402 (the organization's allocation, or the caller's budget) said with what the account routes tell:
 * the organization's name, what it has left, the budget and when it resets (src/cli/refusals.ts).
 */
export async function explainRefusal(
  io: IO,
  origin: string,
  credential: Credential,
  body: unknown,
): Promise<CliError> {
  const entry = await signedInEntry(io, origin);
  const raw = (body as { error?: unknown }).error;
  const error = typeof raw === 'object' && raw ? (raw as Record<string, unknown>) : {};
  const account = await accountCredential(io, origin).catch(() => undefined);
  return paymentRefused(
    origin,
    credential.org ?? actingOrg(entry),
    { code: errorOf(body).code, needed_credits: error.needed_credits },
    async (path) => {
      if (!account) throw new Error('no account credential');
      return (await callWithCredential(io, origin, path, { method: 'GET' }, account)).json();
    },
  );
}

/** GET a /v1 account route with the svc_ key (S|B routes take no OAuth grant). */
export async function getWithKey<T>(io: IO, origin: string, path: string, key: string): Promise<T> {
  const res = await callWithCredential(io, origin, path, { method: 'GET' }, { kind: 'api_key', token: key });
  return (await res.json()) as T;
}
