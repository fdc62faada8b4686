import type { Deps } from '../../../deps.js';
import type { AppError } from '../../../http/errors.js';
import type { CallWriter } from '../../call.js';
import type { PreparedCall } from '../../metering/metered.js';
import { TERMINAL_EVENTS, type NativeObject } from '../../upstream/responses-view.js';
import type {
  ChatBody,
  ChatChunk,
  ChatCompletion,
  ChatMessage,
  ToolCall,
  Usage,
} from '../../upstream/types.js';
import type { ResponsesRequest } from './schema.js';
import { saveStored } from './store.js';
import {
  answerMessage,
  itemId,
  newResponseId,
  responsesUsage,
  type Answer,
  type ResponseObject,
} from './translate.js';

// POST /v1/responses passed through to a provider that speaks the Responses API itself
// (MODEL_UPSTREAM_API=responses). Admission, the slot, the hold and the settle are the
// one call's (src/models/call.ts), exactly as by translation; what differs is the provider leg and the
// wire format:
//
// - the request goes to {MODEL_UPSTREAM_URL}/responses as the caller wrote it (the same allow-list,
//   schema.ts), with svc's changes only: the model forced, `max_output_tokens` capped to what the hold
//   pays, `user` svc's opaque id of the acting user, `store: false`, and the conversation sent whole as
//   input items — svc keeps stored responses and resolves `previous_response_id` and item references
//   itself (docs/decisions/0040-responses-pass-through-keeps-the-conversation.md: the hold must bound the whole prompt, and a response must never be
//   reachable from another organization through the provider account every organization shares);
// - the provider's answer is relayed as it came, event by event, with svc's ids (the response's and its
//   output items', so stored responses and item references work as by translation), the forced model,
//   and the request's own `store`, `previous_response_id`, `metadata` and `max_output_tokens`. The last
//   event (response.completed or .incomplete) is held back until the call is settled: it carries the
//   usage billed, after the outcome comment, as every stream of svc ends.

/** The body sent to the provider's /responses, from the request and the call's prepared chat body. */
export function upstreamBody(
  r: ResponsesRequest,
  conversation: ChatMessage[],
  prepared: ChatBody,
): Record<string, unknown> {
  // Kept in svc or replaced below; never sent as the caller wrote them.
  const {
    input: _input,
    previous_response_id: _previous,
    store: _store,
    metadata: _metadata,
    user: _user,
    safety_identifier: _safety,
    stream_options: _streamOptions,
    max_output_tokens: _max,
    ...rest
  } = r;
  const body: Record<string, unknown> = {
    ...rest,
    // Only the fields the hold's bound counted (the translated request's tools, response_format and
    // verbosity): a key the caller added inside these objects never reaches the provider (CONTRACT §9).
    tools: r.tools?.map((t) => ({
      type: 'function',
      name: t.name,
      ...(t.description != null ? { description: t.description } : {}),
      ...(t.parameters != null ? { parameters: t.parameters } : {}),
      ...(t.strict != null ? { strict: t.strict } : {}),
    })),
    tool_choice:
      r.tool_choice == null || typeof r.tool_choice === 'string'
        ? r.tool_choice
        : { type: 'function', name: r.tool_choice.name },
    text: r.text ? { format: formatOf(r.text.format), verbosity: r.text.verbosity } : undefined,
    reasoning: r.reasoning?.effort != null ? { effort: r.reasoning.effort } : undefined,
    model: prepared.model,
    input: inputItems(conversation),
    max_output_tokens: prepared.max_tokens,
    store: false,
    user: prepared.user,
  };
  for (const [k, v] of Object.entries(body)) if (v === undefined || v === null) delete body[k];
  return body;
}

/** An output format with only the fields translation passes on as `response_format`. */
function formatOf(f: NonNullable<ResponsesRequest['text']>['format']) {
  if (f?.type !== 'json_schema') return f && { type: f.type };
  return {
    type: f.type,
    name: f.name,
    schema: f.schema,
    ...(f.description ? { description: f.description } : {}),
    ...(f.strict != null ? { strict: f.strict } : {}),
  };
}

type ChatPart = { type?: string; text?: string; image_url?: { url: string; detail?: string } };

/** Chat messages (the stored conversation, then the input, as translate.ts reads them) as input items. */
export function inputItems(messages: ChatMessage[]): Record<string, unknown>[] {
  const items: Record<string, unknown>[] = [];
  for (const m of messages) {
    if (m.role === 'tool') {
      const output = typeof m.content === 'string' ? m.content : '';
      items.push({ type: 'function_call_output', call_id: m.tool_call_id, output });
      continue;
    }
    const text = m.role === 'assistant' ? 'output_text' : 'input_text';
    if (typeof m.content === 'string' && (m.content || !m.tool_calls?.length))
      items.push({ type: 'message', role: m.role, content: m.content });
    else if (Array.isArray(m.content))
      items.push({
        type: 'message',
        role: m.role,
        content: (m.content as ChatPart[]).map((p) =>
          p.type === 'image_url'
            ? {
                type: 'input_image',
                image_url: p.image_url?.url,
                ...(p.image_url?.detail ? { detail: p.image_url.detail } : {}),
              }
            : { type: text, text: p.text ?? '' },
        ),
      });
    for (const c of m.tool_calls ?? [])
      items.push({
        type: 'function_call',
        call_id: c.id,
        name: c.function.name,
        arguments: c.function.arguments,
      });
  }
  return items;
}

/** svc's id for an output item: its kind from the item's type (`msg`, `fc`, else its own prefix). */
const kindOf = (item: { type?: unknown; id?: unknown }) =>
  item.type === 'message'
    ? 'msg'
    : item.type === 'function_call'
      ? 'fc'
      : (/^([a-z]+)_/.exec(typeof item.id === 'string' ? item.id : '')?.[1] ?? 'item');

/** What an answer said, from its output items (for the stored conversation). */
function answerOf(output: unknown[]): Answer {
  let text = '';
  const toolCalls: ToolCall[] = [];
  for (const raw of output) {
    const item = raw as { type?: string; content?: { type?: string; text?: string }[] } & Record<
      string,
      unknown
    >;
    if (item.type === 'message')
      for (const p of item.content ?? []) if (p.type === 'output_text') text += p.text ?? '';
    if (item.type === 'function_call')
      toolCalls.push({
        id: String(item.call_id),
        type: 'function',
        function: { name: String(item.name), arguments: String(item.arguments) },
      });
  }
  return { text, toolCalls, finishReason: null };
}

export function passthroughWriter(
  deps: Deps,
  r: ResponsesRequest,
  conversation: ChatMessage[],
  call: PreparedCall,
): CallWriter {
  const id = newResponseId();
  /** Each output item's kind, by its index (deltas name the item by index and the provider's id). */
  const kinds = new Map<number, string>();

  /** The provider's Response as svc's: its ids, the forced model, the request's own settings. */
  function asOurs(native: NativeObject, usage?: Usage): ResponseObject {
    const output = (Array.isArray(native.output) ? native.output : []) as NativeObject[];
    return {
      ...native,
      id,
      object: 'response',
      created_at: Number(native.created_at) || Math.floor(Date.now() / 1000),
      status: (native.status as ResponseObject['status']) ?? 'in_progress',
      model: deps.models.modelId,
      // The provider's items as they came (a reasoning item too), with svc's ids.
      output: output.map((item, i) => ({
        ...item,
        id: itemId(id, kindOf(item), i),
      })) as unknown as ResponseObject['output'],
      max_output_tokens: r.max_output_tokens ?? null,
      previous_response_id: r.previous_response_id ?? null,
      store: r.store ?? true,
      metadata: r.metadata ?? {},
      user: null,
      usage: usage ? responsesUsage(usage) : ((native.usage as ResponseObject['usage']) ?? null),
    };
  }

  let seq = 0;
  let latest: NativeObject = { status: 'in_progress', output: [] };
  let terminal: NativeObject | null = null;
  const send = (event: NativeObject) => {
    if (typeof event.sequence_number === 'number') seq = event.sequence_number + 1;
    return `event: ${String(event.type)}\ndata: ${JSON.stringify(event)}\n\n`;
  };

  /** One provider event with svc's ids and settings. */
  function relay(native: NativeObject): string {
    const event = { ...native };
    const at = typeof event.output_index === 'number' ? event.output_index : null;
    if (event.response && typeof event.response === 'object') {
      latest = event.response as NativeObject;
      event.response = asOurs(latest);
    }
    if (at !== null && event.item && typeof event.item === 'object') {
      const item = event.item as NativeObject;
      kinds.set(at, kindOf(item));
      event.item = { ...item, id: itemId(id, kindOf(item), at) };
    }
    if (at !== null && typeof event.item_id === 'string')
      event.item_id = itemId(id, kinds.get(at) ?? 'msg', at);
    return send(event);
  }

  async function keep(final: ResponseObject) {
    if (r.store === false) return;
    const { orgKey, userId } = call.actor;
    const messages = [...conversation, answerMessage(answerOf(final.output))];
    await saveStored(deps.db, { id, orgKey, userId, messages, response: final }).catch((err: unknown) =>
      deps.log.error({ err, requestId: call.requestId }, 'stored response not written'),
    );
  }

  return {
    async json(completion: ChatCompletion, usage: Usage) {
      const final = asOurs(completion.native as NativeObject, usage);
      await keep(final);
      return final;
    },
    open: () => '',
    chunk(chunk: ChatChunk) {
      const native = chunk.native as NativeObject;
      if (TERMINAL_EVENTS.has(String(native.type))) {
        terminal = native;
        return '';
      }
      return relay(native);
    },
    async end(usage: Usage) {
      const last = terminal ?? { type: 'response.completed', response: { ...latest, status: 'completed' } };
      const final = asOurs((last.response ?? latest) as NativeObject, usage);
      await keep(final);
      return send({ ...last, response: final });
    },
    fail(err: AppError) {
      const error = { code: err.code.toLowerCase(), message: err.message };
      const failed = { ...asOurs(latest), status: 'failed', error };
      return (
        send({ type: 'error', sequence_number: seq, ...error, param: err.extra.param ?? null }) +
        send({ type: 'response.failed', sequence_number: seq, response: failed })
      );
    },
  };
}
