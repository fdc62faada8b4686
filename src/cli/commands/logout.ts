import * as oauth from 'oauth4webapi';
import { readEntry, updateEntry } from '../credentials.js';
import { EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { jsonText } from '../inert.js';
import { CLI_CLIENT, CLI_CLIENT_AUTH, discover, httpOptions, reach, serverOrigin } from '../server.js';

// `svc logout`: revokes both grants at the server (RFC 7009; revoking a refresh token revokes its whole
// grant, docs/oauth.md), then forgets the server's entry. The svc_ key of `login --api-key` is forgotten
// locally only — it is a durable credential for scripts; a new `svc login --api-key` for that organization
// replaces it, and `svc keys revoke ID` (POST /v1/tokens/revoke, a session's route) revokes it.

export async function logout(io: IO, opts: { url?: string; json?: boolean }): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  const entry = await readEntry(io.env, origin);
  if (!entry) {
    if (opts.json) line(io.stdout, jsonText({ server: origin, revoked: [] }));
    else line(io.stdout, `Not signed in to ${origin}; nothing to do.`);
    return EXIT.ok;
  }
  const revoked: string[] = [];
  const grants = Object.entries(entry.grants ?? {});
  if (grants.length) {
    const as = await discover(origin);
    for (const [kind, grant] of grants) {
      const res = await reach(origin, () =>
        oauth.revocationRequest(as, CLI_CLIENT, CLI_CLIENT_AUTH, grant.refresh_token, httpOptions(origin)),
      );
      await oauth.processRevocationResponse(res); // throws unless 200: the entry stays for another try
      revoked.push(kind);
    }
  }
  await updateEntry(io.env, origin, () => undefined);
  if (opts.json) {
    line(io.stdout, jsonText({ server: origin, revoked, api_key_forgotten: Boolean(entry.api_key) }));
  } else {
    line(
      io.stdout,
      `Signed out of ${origin}${revoked.length ? ` (revoked the ${revoked.join(' and ')} grants)` : ''}.`,
    );
    if (entry.api_key) {
      line(
        io.stdout,
        'The API key was removed from this machine but still works until you revoke it (`svc keys` lists ' +
          'your keys, `svc keys revoke ID` ends one), or a new `svc login --api-key` in its organization replaces it.',
      );
    }
  }
  return EXIT.ok;
}
