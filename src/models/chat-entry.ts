import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import express from 'express';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { sendError } from '../http/error-middleware.js';
import { hasNul, nulFound } from '../http/input-guard.js';
import { requestLogger } from '../http/request-log.js';
import { startSpareAdmission, type ChatHttpRequest } from './chat-admission.js';
import { chatCompletionsRoute } from './routes.js';

// The chat call's own HTTP entry, ahead of Express: nearly all the model traffic is
// POST /v1/chat/completions, and Express cost it about 0.3 ms of its first streamed byte (A/B in
// docs/models.md, first byte). Express gives each request and response a prototype of its own
// (Object.setPrototypeOf, for req.get, res.json, …), after which V8 reads their properties the slow way,
// in Node's HTTP code and every step after it; its router walks layers on top.
//
// Taken here: exactly that path with no query string, whatever the credential. A query (org_id) and
// every other route go to Express, which mounts the same steps for the same path (src/app.ts): the
// request log, the spare's early read, the JSON body (10 MB), the NUL guard, the route
// (chatCompletionsRoute, the same function); errors in the OpenAI shape (sendError, the same function).
// test/models-chat-entry.test.ts checks that both ways answer alike.

export const CHAT_PATH = '/v1/chat/completions';
/** Chat histories are long. */
export const CHAT_BODY_LIMIT = '10mb';

type Step = (req: ChatHttpRequest, res: ServerResponse, next: (err?: unknown) => void) => void;

export function chatEntry(deps: Deps, auth: Auth, app: RequestListener): RequestListener {
  const log = requestLogger(deps.log);
  const spare = startSpareAdmission(deps, auth);
  const json = express.json({ limit: CHAT_BODY_LIMIT }) as unknown as Step;

  const route = chatCompletionsRoute(deps, auth);

  return (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== 'POST' || req.url !== CHAT_PATH) return app(req, res);
    const fail = (err: unknown) => sendError(deps.log, err, req, res, 'openai');
    log(req, res, () =>
      spare(req, res, () =>
        json(req, res, (err) => {
          if (err) return fail(err);
          if (hasNul((req as ChatHttpRequest).body)) return fail(nulFound('body'));
          route(req, res).catch(fail);
        }),
      ),
    );
  };
}
