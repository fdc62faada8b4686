import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { sendError } from '../http/error-middleware.js';
import { asOutage } from '../db/outage.js';
import { rejectNulCharacters } from '../http/input-guard.js';
import { requestLogger } from '../http/request-log.js';
import { devHostGuard } from '../http/host-guard.js';
import { jsonBody } from '../http/json-body.js';
import { runSteps, type EntryStep } from '../http/entry-steps.js';
import { startSpareAdmission, type ChatHttpRequest } from './chat-admission.js';
import { credentialBeforeBody } from './chat-credential.js';
import { chatCompletionsRoute } from './chat.js';
import { nameRoute } from '../telemetry/spans.js';

// The chat call's own HTTP entry, ahead of Express: nearly all the model traffic is
// POST /v1/chat/completions, and Express cost it about 0.3 ms of its first streamed byte (A/B in
// docs/models.md, first byte). Express gives each request and response a prototype of its own
// (Object.setPrototypeOf, for req.get, res.json, …), after which V8 reads their properties the slow way,
// in Node's HTTP code and every step after it; its router walks layers on top.
//
// Taken here: exactly that path with no query string, whatever the credential. A query (org_id) and
// every other route go to Express, which mounts the same steps for the same path (src/app.ts): the
// request log, the spare's early read, the credential, the JSON body (10 MB), the NUL guard, the route
// (chatSteps and chatCompletionsRoute, the same functions); errors in the OpenAI shape (sendError, as
// Express's error middleware).
// test/models/models-chat-entry.test.ts checks that both ways answer alike.

export const CHAT_PATH = '/v1/chat/completions';
/** Chat histories are long. */
const CHAT_BODY_LIMIT = '10mb';

type Step = EntryStep<ChatHttpRequest>;

/**
 * The steps of a chat call between the request log and the route, in order: the spare's early read
 * (before the body is read), the credential (before the body is read: chat-credential.ts), the JSON
 * body (nesting limited: src/http/json-body.ts), the NUL guard. Express mounts them for a chat call with a
 * query (src/app.ts); the entry below runs them for the others.
 */
export function chatSteps(deps: Deps, auth: Auth): Step[] {
  return [
    startSpareAdmission(deps, auth),
    credentialBeforeBody(deps, auth),
    jsonBody({ limit: CHAT_BODY_LIMIT }),
    rejectNulCharacters(),
  ];
}

export function chatEntry(deps: Deps, auth: Auth, app: RequestListener): RequestListener {
  // As Express runs them (src/app.ts): the request log, dev mode's Host guard, then the chat steps.
  const hostGuard = devHostGuard(deps.config);
  const steps: Step[] = [
    requestLogger(deps.log, deps.config),
    ...(hostGuard ? [hostGuard] : []),
    ...chatSteps(deps, auth),
  ];
  const route = chatCompletionsRoute(deps, auth);

  return (req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== 'POST' || req.url !== CHAT_PATH) return app(req, res);
    nameRoute(CHAT_PATH); // the server span's name, as Express would give it (CONTRACT §1)
    // A database outage is 503 with Retry-After, as on every route (src/db/outage.ts), never a 500.
    const fail = (err: unknown) =>
      void asOutage(deps.db, err).then((e) => sendError(deps.log, e, req, res, 'openai'));
    runSteps(steps, req, res, route, fail);
  };
}
