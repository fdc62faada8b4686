import type { Deps } from '../src/deps.js';
import { rejectNulCharacters } from '../src/http/input-guard.js';
import { formBody } from '../src/http/form-body.js';
import { jsonBody } from '../src/http/json-body.js';
import type { EntryStep, FastEntry } from '../src/http/entry-steps.js';
import { oauthCors } from './cors.js';
import { limitMetadataFetches } from './fetch-limit.js';
import { TOKEN_PATH, tokenEndpoint, type TokenHttpRequest } from './token.js';

// The token request's own HTTP entry, ahead of Express, as the chat call has one
// (src/models/entry.ts; decision 0021): a refresh is small, and Express's prototypes and its walk through
// every router mounted before the token route were about a quarter of svc's CPU per refresh.
//
// Taken here: POST /oauth/token with no query string and a form body. Every other POST (a query, a JSON
// body) goes to Express, which mounts this same row (src/app.ts: the route table): after the front steps
// both ways share (the request log, dev mode's Host guard: src/http/entry-steps.ts), the form body
// (100 KB; a JSON body is read too, up to 1 MB, and refused), the NUL guard, CORS, the metadata-fetch
// limit, the endpoint (tokenEndpoint); errors in the
// RFC 6749 shape, a database outage as 503. OPTIONS is answered by oauth/routes.ts's CORS.
// test/oauth/oauth-token-entry.test.ts checks that both ways answer alike.

const FORM = /^application\/x-www-form-urlencoded\s*(;|$)/i;

export function tokenEntry(deps: Deps): FastEntry<TokenHttpRequest> {
  return {
    path: TOKEN_PATH,
    aheadOfExpress: true,
    accepts: (req) => FORM.test(req.headers['content-type'] ?? ''),
    surface: 'oauth',
    // CORS and the metadata-fetch limit are typed as Express middleware but read only what plain node
    // objects carry.
    steps: [
      formBody(),
      // A JSON body (Express's way in only) is read before it is refused, as every route's is: a body that
      // stalls is 408, one that arrives is answered invalid_request (tokenEndpoint).
      jsonBody({ limit: '1mb' }),
      rejectNulCharacters(),
      oauthCors,
      limitMetadataFetches(deps),
    ] as EntryStep<TokenHttpRequest>[],
    route: tokenEndpoint(deps),
  };
}
