import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import express from 'express';
import type { Deps } from '../src/deps.js';
import { sendError } from '../src/http/error-middleware.js';
import { asOutage } from '../src/db/outage.js';
import { rejectNulCharacters } from '../src/http/input-guard.js';
import { requestLogger } from '../src/http/request-log.js';
import { devHostGuard } from '../src/http/host-guard.js';
import { runSteps, type EntryStep } from '../src/http/entry-steps.js';
import { oauthCors } from './cors.js';
import { limitMetadataFetches } from './fetch-limit.js';
import { TOKEN_PATH, tokenEndpoint, type TokenHttpRequest } from './token.js';
import { nameRoute } from '../src/telemetry/spans.js';

// The token request's own HTTP entry, ahead of Express, as the chat call has one
// (src/models/chat-entry.ts): a refresh is small, and Express's prototypes and its walk through every
// router mounted before the token route were about a quarter of svc's CPU per refresh (A/B in
// docs/oauth.md, What a refresh costs).
//
// Taken here: POST /oauth/token with no query string and a form body. Every other request (a query, a
// JSON body, OPTIONS) goes to Express, which mounts the same steps for the same path (src/app.ts,
// oauth/routes.ts): the request log, dev mode's Host guard, the form body (100 KB), the NUL guard, CORS,
// the metadata-fetch limit, the endpoint (tokenEndpoint, the same function); errors in the RFC 6749
// shape (sendError, as Express's error middleware), a database outage as 503.
// test/oauth/oauth-token-entry.test.ts checks that both ways answer alike.

const FORM = /^application\/x-www-form-urlencoded\s*(;|$)/i;

export function tokenEntry(deps: Deps, app: RequestListener): RequestListener {
  const hostGuard = devHostGuard(deps.config);
  // As Express runs them for this path (src/app.ts, oauth/routes.ts). CORS and the metadata-fetch limit
  // are typed as Express middleware but read only what plain node objects carry.
  const steps = [
    requestLogger(deps.log, deps.config),
    ...(hostGuard ? [hostGuard] : []),
    express.urlencoded({ extended: false, limit: '100kb' }), // as src/app.ts parses every form
    rejectNulCharacters(),
    oauthCors,
    limitMetadataFetches(deps),
  ] as EntryStep<TokenHttpRequest>[];
  const endpoint = tokenEndpoint(deps);

  return (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== 'POST' || req.url !== TOKEN_PATH || !FORM.test(req.headers['content-type'] ?? ''))
      return app(req, res);
    nameRoute(TOKEN_PATH); // the server span's name, as Express would give it (CONTRACT §1)
    const fail = (err: unknown) =>
      void asOutage(deps.db, err).then((e) => sendError(deps.log, e, req, res, 'oauth'));
    runSteps(steps, req, res, endpoint, fail);
  };
}
