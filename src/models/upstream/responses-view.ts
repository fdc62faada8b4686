import { errorOf } from '../../http/errors.js';
import { MODEL_ERRORS } from '../errors.js';
import type { ChatChunk, ChatCompletion, ToolCall, Usage } from './types.js';

// A provider's own Responses API answer seen as chat (MODEL_UPSTREAM_API=responses).
// The one model call (src/models/call.ts) meters, settles and bills by chat completions' shapes; a
// pass-through answer is given to it as that view — its text, its function calls with their arguments,
// why it stopped, its usage — with the provider's own object or event kept in `native`, which the
// Responses front-end relays (src/models/front-ends/responses/passthrough.ts). So a passed-through call is counted
// by the same rules as every other call: the provider's usage when it reports one, else one token per
// content piece at least (CONTRACT §8), and nothing needs a second meter.

/** A Response object or stream event as the provider sent it. */
export type NativeObject = Record<string, unknown>;

interface NativeUsage {
  input_tokens?: unknown;
  input_tokens_details?: { cached_tokens?: unknown } | null;
  output_tokens?: unknown;
  output_tokens_details?: { reasoning_tokens?: unknown } | null;
}

interface NativeItem {
  type?: unknown;
  call_id?: unknown;
  name?: unknown;
  arguments?: unknown;
  content?: { type?: unknown; text?: unknown }[];
}

const count = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && v >= 0;

/**
 * The Responses usage in chat's words (input → prompt, output → completion, cached and reasoning
 * details kept), or undefined when the provider sent none usable: the call is then counted (CONTRACT §8).
 */
export function chatUsage(u: unknown): Usage | undefined {
  const usage = u as NativeUsage | null | undefined;
  if (!usage || !count(usage.input_tokens) || !count(usage.output_tokens)) return undefined;
  const cached = usage.input_tokens_details?.cached_tokens;
  const reasoning = usage.output_tokens_details?.reasoning_tokens;
  return {
    prompt_tokens: usage.input_tokens,
    completion_tokens: usage.output_tokens,
    total_tokens: usage.input_tokens + usage.output_tokens,
    // As given: pricing.ts clamps a cached count it cannot trust, as on chat.
    ...(cached !== undefined ? { prompt_tokens_details: { cached_tokens: cached } } : {}),
    ...(count(reasoning) ? { completion_tokens_details: { reasoning_tokens: reasoning } } : {}),
  };
}

const str = (v: unknown) => (typeof v === 'string' ? v : '');

/** Why a response stopped, as chat's finish_reason. */
function finishOf(response: NativeObject, hasCalls: boolean): string {
  if (response.status === 'incomplete') {
    const reason = (response.incomplete_details as { reason?: unknown } | null)?.reason;
    return reason === 'content_filter' ? 'content_filter' : 'length';
  }
  return hasCalls ? 'tool_calls' : 'stop';
}

const failed = () => errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider failed to answer');
const malformed = () => errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider sent a malformed answer');

/** A whole Response object (a JSON call) as a chat completion. */
export function completionView(native: unknown): ChatCompletion {
  if (!native || typeof native !== 'object' || !Array.isArray((native as NativeObject).output))
    throw malformed();
  const response = native as NativeObject & { output: NativeItem[] };
  if (response.status === 'failed') throw failed();
  let text = '';
  const toolCalls: ToolCall[] = [];
  for (const item of response.output) {
    if (item?.type === 'message')
      for (const part of item.content ?? []) if (part?.type === 'output_text') text += str(part.text);
    if (item?.type === 'function_call')
      toolCalls.push({
        id: str(item.call_id),
        type: 'function',
        function: { name: str(item.name), arguments: str(item.arguments) },
      });
  }
  const usage = chatUsage(response.usage);
  return {
    id: str(response.id),
    object: 'chat.completion',
    created: Number(response.created_at) || 0,
    model: str(response.model),
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: toolCalls.length && !text ? null : text,
          ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
        },
        finish_reason: finishOf(response, toolCalls.length > 0),
      },
    ],
    ...(usage ? { usage } : {}),
    native: response,
  };
}

/** Events that end a response stream: the settle comes after them. */
export const TERMINAL_EVENTS = new Set(['response.completed', 'response.incomplete']);

/**
 * The stream's events, one by one, as chat chunks. Stateful: a function call's argument deltas name
 * its output item, which the view turns into the call's index among the calls, as chat numbers them.
 */
export function streamView() {
  const callIndex = new Map<number, number>();
  let ended = false;
  const chunk = (native: NativeObject, choices: ChatChunk['choices'], usage?: Usage): ChatChunk => ({
    id: '',
    object: 'chat.completion.chunk',
    created: 0,
    model: '',
    choices,
    ...(usage ? { usage } : {}),
    native,
  });
  const delta = (native: NativeObject, d: ChatChunk['choices'][number]['delta']) =>
    chunk(native, [{ index: 0, delta: d, finish_reason: null }]);

  return {
    /** A response.completed or response.incomplete was seen (a stream that ends without one failed). */
    get ended() {
      return ended;
    },
    event(data: string): ChatChunk {
      let native: NativeObject;
      try {
        native = JSON.parse(data) as NativeObject;
      } catch {
        throw errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider sent a malformed stream');
      }
      const type = native?.type;
      if (type === 'error' || type === 'response.failed')
        throw errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider failed mid-stream');
      const at = Number(native.output_index);
      if (type === 'response.output_text.delta') return delta(native, { content: str(native.delta) });
      if (type === 'response.output_item.added') {
        const item = native.item as NativeItem | undefined;
        if (item?.type !== 'function_call') return chunk(native, []);
        const index = callIndex.size;
        callIndex.set(at, index);
        return delta(native, {
          tool_calls: [
            {
              index,
              id: str(item.call_id),
              type: 'function',
              function: { name: str(item.name), arguments: str(item.arguments) },
            },
          ],
        });
      }
      if (type === 'response.function_call_arguments.delta') {
        const index = callIndex.get(at);
        if (index === undefined) return chunk(native, []);
        return delta(native, { tool_calls: [{ index, function: { arguments: str(native.delta) } }] });
      }
      if (typeof type === 'string' && TERMINAL_EVENTS.has(type)) {
        ended = true;
        const response = (native.response ?? {}) as NativeObject;
        return chunk(
          native,
          [{ index: 0, delta: {}, finish_reason: finishOf(response, callIndex.size > 0) }],
          chatUsage(response.usage),
        );
      }
      return chunk(native, []);
    },
  };
}
