import type { ServerResponse } from 'node:http';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { rejectNulCharacters } from '../http/input-guard.js';
import { jsonBody } from '../http/json-body.js';
import { stepDone, type FastEntry } from '../http/entry-steps.js';
import { readCallerBeforeBody, startAdmission, type ModelHttpRequest } from './admission/admission.js';
import { modelCall, type FrontEnd } from './call.js';
import { CHAT_PATH, chatFrontEnd } from './front-ends/chat.js';
import { RESPONSES_PATH, responsesFrontEnd } from './front-ends/responses/route.js';
import { apiKeyAsBearer, MESSAGES_PATH, messagesFrontEnd } from './front-ends/messages/route.js';

// The model call's entry: one table of its routes (the three front-ends of src/models/call.ts), from which
// Express mounts every one (src/app.ts, ahead of every other layer, so they walk none of them) and the
// node-level entry serves the chat call without a query string (src/server.ts; decision 0001: Express's
// prototypes and router cost its first streamed byte about 0.3 ms). Both ways run the same function,
// modelRoute, after the same front steps (src/http/entry-steps.ts); errors in the OpenAI shape.
// test/models/models-chat-entry.test.ts checks that both ways answer alike.

/** Chat histories are long. */
const MODEL_BODY_LIMIT = '10mb';

export interface ModelRoute {
  path: string;
  /** Served by the node-level entry when it has no query string (else, and always for the others, Express). */
  aheadOfExpress: boolean;
  handle(req: ModelHttpRequest, res: ServerResponse): Promise<void>;
}

export function modelRouteTable(deps: Deps, auth: Auth): ModelRoute[] {
  const messages = messagesFrontEnd(deps);
  return [
    { path: CHAT_PATH, aheadOfExpress: true, handle: modelRoute(deps, auth, () => chatFrontEnd) },
    { path: RESPONSES_PATH, aheadOfExpress: false, handle: modelRoute(deps, auth, responsesFrontEnd(deps)) },
    // Anthropic's clients send their key in x-api-key: read as the bearer before anything reads it.
    {
      path: MESSAGES_PATH,
      aheadOfExpress: false,
      handle: modelRoute(deps, auth, () => messages, apiKeyAsBearer),
    },
  ];
}

/** The table's routes the node-level entry serves (src/server.ts). */
export function modelEntriesAheadOfExpress(deps: Deps, auth: Auth): FastEntry<ModelHttpRequest>[] {
  return modelRouteTable(deps, auth)
    .filter((r) => r.aheadOfExpress)
    .map((r) => ({ path: r.path, surface: 'openai', steps: [], route: (req, res) => r.handle(req, res) }));
}

/**
 * A model route, every step in order: the admission started as the request arrives (the spare's early
 * read), the credential read before the body, the JSON body (nesting limited: src/http/json-body.ts), the
 * NUL guard, then the one model call with the admission the steps made.
 */
function modelRoute(
  deps: Deps,
  auth: Auth,
  frontEnd: () => FrontEnd,
  credentialFrom?: (req: ModelHttpRequest) => void,
): ModelRoute['handle'] {
  const body = jsonBody({ limit: MODEL_BODY_LIMIT });
  const nulGuard = rejectNulCharacters();
  return async (req, res) => {
    credentialFrom?.(req);
    const admission = startAdmission(deps, auth, req, res);
    // The common call goes on at once, without a promise in between (admission.ts).
    const reading = readCallerBeforeBody(deps, auth, admission, req);
    if (reading) await reading;
    await stepDone(body, req, res);
    await stepDone(nulGuard, req, res);
    await modelCall(deps, auth, admission, req, res, frontEnd());
  };
}
