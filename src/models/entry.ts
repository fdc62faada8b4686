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

/** The model routes' rows of the route table (src/app.ts); each runs its steps inside (modelRoute). */
export function modelRouteTable(deps: Deps, auth: Auth): FastEntry<ModelHttpRequest>[] {
  const messages = messagesFrontEnd(deps);
  const row = (
    path: string,
    aheadOfExpress: boolean,
    route: ModelRouteHandler,
  ): FastEntry<ModelHttpRequest> => ({
    path,
    aheadOfExpress,
    surface: 'openai',
    steps: [],
    route,
  });
  return [
    row(
      CHAT_PATH,
      true,
      modelRoute(deps, auth, () => chatFrontEnd),
    ),
    row(RESPONSES_PATH, false, modelRoute(deps, auth, responsesFrontEnd(deps))),
    // Anthropic's clients send their key in x-api-key: read as the bearer before anything reads it.
    row(
      MESSAGES_PATH,
      false,
      modelRoute(deps, auth, () => messages, apiKeyAsBearer),
    ),
  ];
}

type ModelRouteHandler = (req: ModelHttpRequest, res: ServerResponse) => Promise<void>;

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
): ModelRouteHandler {
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
