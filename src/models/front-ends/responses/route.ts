import type { Request, Response } from 'express';
import type { Deps } from '../../../deps.js';
import type { Auth } from '../../../auth/principal.js';
import { errorOf, COMMON_ERRORS } from '../../../http/errors.js';
import { MODEL_ERRORS } from '../../errors.js';
import { actorOf } from '../../admission/actor.js';
import type { FrontEnd } from '../../call.js';
import type { ChatMessage } from '../../upstream/types.js';
import { parseResponsesRequest, responsesRequest, type InputItem, type ResponsesRequest } from './schema.js';
import { deleteStored, loadStored } from './store.js';
import { inputMessages, outputItemMessages, parseItemId, toChatRequest } from './translate.js';
import { responsesWriter } from './writer.js';
import { passthroughWriter, upstreamBody } from './passthrough.js';

// POST /v1/responses (OpenAI Responses API): the second front-end of the one model call
// (src/models/call.ts), with the same credentials, rules and billing as chat. GET and DELETE
// /v1/responses/{id} read and remove a stored response of the acting organization. A provider that speaks
// only chat is served by translation (translate.ts, writer.ts); with MODEL_UPSTREAM_API=responses the
// request passes through to the provider's own Responses API (passthrough.ts). Either way the
// conversation is svc's: stored here, continued here.

export const RESPONSES_PATH = '/v1/responses';

/**
 * A front-end per request (it keeps the parsed request and the conversation between intake and writer),
 * mounted with the others by the model routes' table (src/models/entry.ts).
 */
export function responsesFrontEnd(deps: Deps): () => FrontEnd {
  const native = deps.models.upstream.responses;
  return () => {
    let parsed: ResponsesRequest | undefined;
    let conversation: ChatMessage[] = [];
    const frontEnd: FrontEnd = {
      intake: {
        // A request that continues a stored conversation needs its org's rows: the general way.
        quick(body) {
          const p = responsesRequest.safeParse(body);
          if (!p.success || p.data.previous_response_id || hasReference(p.data.input)) return null;
          parsed = p.data;
          conversation = inputMessages(p.data.input, new Map());
          return toChatRequest(parsed, conversation);
        },
        async full(body, actor) {
          parsed = parseResponsesRequest(body);
          conversation = await conversationOf(deps, actor.orgKey, parsed);
          return toChatRequest(parsed, conversation);
        },
      },
      writer: (_request, call) =>
        (native ? passthroughWriter : responsesWriter)(deps, parsed!, conversation, call),
    };
    // The hold is sized from the translated request (the same prompt, its bound the same), and the
    // provider gets the Responses request with the call's forced model and capped limit.
    if (native)
      frontEnd.provider = {
        complete: (body, signal) => native.complete(upstreamBody(parsed!, conversation, body), signal),
        stream: (body, signal) => native.stream(upstreamBody(parsed!, conversation, body), signal),
      };
    return frontEnd;
  };
}

const hasReference = (input: ResponsesRequest['input']) =>
  typeof input !== 'string' && input.some((i) => i.type === 'item_reference');

/**
 * The conversation the call continues, in chat messages: the previous response's (instructions are not
 * carried over, as OpenAI does), then the input, with item references read from the org's stored responses.
 */
async function conversationOf(deps: Deps, orgKey: string, r: ResponsesRequest): Promise<ChatMessage[]> {
  let history: ChatMessage[] = [];
  if (r.previous_response_id) {
    const previous = await loadStored(deps.db, orgKey, r.previous_response_id);
    if (!previous) {
      throw errorOf(
        MODEL_ERRORS,
        'PREVIOUS_RESPONSE_NOT_FOUND',
        `Previous response with id '${r.previous_response_id}' not found.`,
        { param: 'previous_response_id' },
      );
    }
    history = previous.messages;
  }
  const resolved = new Map<string, ChatMessage[]>();
  const items: InputItem[] = typeof r.input === 'string' ? [] : r.input;
  for (const [i, item] of items.entries()) {
    if (item.type !== 'item_reference' || resolved.has(item.id)) continue;
    const ref = parseItemId(item.id);
    const stored = ref && (await loadStored(deps.db, orgKey, ref.responseId));
    const output = ref && stored?.response.output[ref.index];
    if (!output) {
      throw errorOf(MODEL_ERRORS, 'ITEM_NOT_FOUND', `Item with id '${item.id}' not found.`, {
        param: `input.${i}.id`,
      });
    }
    resolved.set(item.id, outputItemMessages(output));
  }
  return [...history, ...inputMessages(r.input, resolved)];
}

const notFound = (id: string) =>
  errorOf(COMMON_ERRORS, 'NOT_FOUND', `Response with id '${id}' not found.`, { param: 'response_id' });

/** GET /v1/responses/{id}: the acting organization's stored response. */
export function getStoredResponse(deps: Deps, auth: Auth) {
  return async (req: Request, res: Response) => {
    const actor = await actorOf(deps, auth, req, { spend: false });
    const stored = await loadStored(deps.db, actor.orgKey, String(req.params.id));
    if (!stored) throw notFound(String(req.params.id));
    res.json(stored.response);
  };
}

/** DELETE /v1/responses/{id}: members who can spend; a viewer reads only (CONTRACT §9: 403 `NO_ACCESS`). */
export function deleteStoredResponse(deps: Deps, auth: Auth) {
  return async (req: Request, res: Response) => {
    const actor = await actorOf(deps, auth, req, { spend: false });
    // The code as CONTRACT §9 writes it (the OpenAI shape would lower-case it).
    if (actor.role === 'viewer')
      throw errorOf(
        COMMON_ERRORS,
        'NO_ACCESS',
        "a viewer may read the organization's stored responses, not delete them",
        {
          fields: { code: 'NO_ACCESS' },
        },
      );
    const id = String(req.params.id);
    if (!(await deleteStored(deps.db, actor.orgKey, id))) throw notFound(id);
    res.json({ id, object: 'response', deleted: true });
  };
}
