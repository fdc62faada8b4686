import { randomBytes } from 'node:crypto';
import type { ChatRequest } from '../../schema.js';
import type { ChatMessage, ToolCall, Usage } from '../../upstream/types.js';
import type { ContentPart, InputItem, ResponsesRequest } from './schema.js';

// The Responses API over the internal call, by translation: a Responses request
// becomes a chat completions request (input items → messages, function tools → tools, text.format →
// response_format, max_output_tokens → max_tokens), and the chat answer becomes a Response object
// (output items: one assistant message, one function_call per tool call). What a provider speaking only
// chat completions (svc-local, most OpenAI-compatible providers) can serve.

/**
 * A new response's id and the ids of its output items, which carry it: `msg_<tail>_<i>`, `fc_<tail>_<i>`
 * (a provider's other items when passed through: `rs_<tail>_<i>`, …).
 */
export function newResponseId(): string {
  return `resp_${randomBytes(16).toString('hex')}`;
}
export const itemId = (responseId: string, kind: string, index: number) =>
  `${kind}_${responseId.slice('resp_'.length)}_${index}`;

/** The response an output item id names, and the item's place in its output. */
export function parseItemId(id: string): { responseId: string; index: number } | null {
  const m = /^[a-z]{1,16}_([0-9a-f]{32})_(\d{1,4})$/.exec(id);
  return m ? { responseId: `resp_${m[1]}`, index: Number(m[2]) } : null;
}

/** What a call answered, from a JSON completion or assembled from a stream. */
export interface Answer {
  text: string;
  toolCalls: ToolCall[];
  finishReason: string | null;
}

export interface ResponseObject {
  id: string;
  object: 'response';
  created_at: number;
  status: 'in_progress' | 'completed' | 'incomplete' | 'failed';
  output: OutputItem[];
  usage: ResponsesUsage | null;
  [k: string]: unknown;
}

export type OutputItem =
  | {
      type: 'message';
      id: string;
      status: 'completed' | 'in_progress';
      role: 'assistant';
      content: { type: 'output_text'; text: string; annotations: unknown[] }[];
    }
  | {
      type: 'function_call';
      id: string;
      call_id: string;
      name: string;
      arguments: string;
      status: 'completed' | 'in_progress';
    };

export interface ResponsesUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

const partText = (p: ContentPart) =>
  p.type === 'refusal' ? p.refusal : p.type === 'input_image' ? '' : p.text;

/** Content parts as chat content: a string when all are text (what every provider takes), else parts. */
function chatContent(content: string | ContentPart[]): ChatMessage['content'] {
  if (typeof content === 'string') return content;
  if (content.every((p) => p.type !== 'input_image')) return content.map(partText).join('');
  return content.map((p) =>
    p.type === 'input_image'
      ? { type: 'image_url', image_url: { url: p.image_url, ...(p.detail ? { detail: p.detail } : {}) } }
      : { type: 'text', text: partText(p) },
  );
}

/** Input items as chat messages; function calls in a row join one assistant message, as chat has them. */
export function inputMessages(
  input: string | InputItem[],
  resolved: Map<string, ChatMessage[]>,
): ChatMessage[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  const out: ChatMessage[] = [];
  for (const item of input) {
    if (item.type === 'item_reference') out.push(...(resolved.get(item.id) ?? []));
    else if (item.type === 'function_call') {
      const call: ToolCall = {
        id: item.call_id,
        type: 'function',
        function: { name: item.name, arguments: item.arguments },
      };
      const last = out.at(-1);
      if (last?.role === 'assistant' && last.tool_calls) last.tool_calls.push(call);
      else out.push({ role: 'assistant', content: null, tool_calls: [call] });
    } else if (item.type === 'function_call_output') {
      const content = typeof item.output === 'string' ? item.output : item.output.map(partText).join('');
      out.push({ role: 'tool', tool_call_id: item.call_id, content });
    } else {
      const content = chatContent(item.content);
      out.push({
        role: item.role,
        content: item.role === 'assistant' && typeof content !== 'string' ? '' : content,
      });
    }
  }
  return out;
}

/**
 * An output item of a stored response as chat messages (for an item_reference). A provider's item of
 * another kind (a reasoning item, passed through) carries nothing the conversation can resend.
 */
export function outputItemMessages(item: OutputItem): ChatMessage[] {
  if (item.type === 'message')
    return [{ role: 'assistant', content: item.content.map((c) => c.text ?? '').join('') }];
  if (item.type !== 'function_call') return [];
  return [
    {
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } },
      ],
    },
  ];
}

/** The chat request the internal call makes: `history` is a stored conversation continued, if any. */
export function toChatRequest(r: ResponsesRequest, conversation: ChatMessage[]): ChatRequest {
  const messages: ChatMessage[] = [
    ...(r.instructions ? [{ role: 'system', content: r.instructions }] : []),
    ...conversation,
  ];
  const f = r.text?.format;
  const choice = r.tool_choice;
  const request = {
    model: r.model,
    messages,
    stream: r.stream ?? undefined,
    max_tokens: r.max_output_tokens ?? undefined,
    temperature: r.temperature ?? undefined,
    top_p: r.top_p ?? undefined,
    parallel_tool_calls: r.parallel_tool_calls ?? undefined,
    prompt_cache_key: r.prompt_cache_key ?? undefined,
    reasoning_effort: r.reasoning?.effort ?? undefined,
    verbosity: r.text?.verbosity ?? undefined,
    ...(r.tools?.length
      ? {
          tools: r.tools.map((t) => ({
            type: 'function',
            function: {
              name: t.name,
              ...(t.description ? { description: t.description } : {}),
              ...(t.parameters ? { parameters: t.parameters } : {}),
              ...(t.strict != null ? { strict: t.strict } : {}),
            },
          })),
        }
      : {}),
    ...(choice
      ? {
          tool_choice:
            typeof choice === 'string' ? choice : { type: 'function', function: { name: choice.name } },
        }
      : {}),
    ...(f && f.type !== 'text'
      ? {
          response_format:
            f.type === 'json_object'
              ? { type: 'json_object' }
              : {
                  type: 'json_schema',
                  json_schema: {
                    name: f.name,
                    schema: f.schema,
                    ...(f.description ? { description: f.description } : {}),
                    ...(f.strict != null ? { strict: f.strict } : {}),
                  },
                },
        }
      : {}),
  };
  for (const [k, v] of Object.entries(request))
    if (v === undefined) delete (request as Record<string, unknown>)[k];
  return request as unknown as ChatRequest;
}

/** Chat usage in the Responses API's words. */
export function responsesUsage(u: Usage): ResponsesUsage {
  const cached = (u.prompt_tokens_details as { cached_tokens?: unknown } | undefined)?.cached_tokens;
  const reasoning = (u.completion_tokens_details as { reasoning_tokens?: unknown } | undefined)
    ?.reasoning_tokens;
  return {
    input_tokens: u.prompt_tokens,
    input_tokens_details: { cached_tokens: typeof cached === 'number' ? cached : 0 },
    output_tokens: u.completion_tokens,
    output_tokens_details: { reasoning_tokens: typeof reasoning === 'number' ? reasoning : 0 },
    total_tokens: u.total_tokens ?? u.prompt_tokens + u.completion_tokens,
  };
}

/** The output items of an answer: the assistant's text (when there is some, or nothing else), then its calls. */
export function outputItems(responseId: string, a: Answer): OutputItem[] {
  const items: OutputItem[] = [];
  if (a.text || a.toolCalls.length === 0) {
    items.push({
      type: 'message',
      id: itemId(responseId, 'msg', 0),
      status: 'completed',
      role: 'assistant',
      content: [{ type: 'output_text', text: a.text, annotations: [] }],
    });
  }
  for (const c of a.toolCalls) {
    items.push({
      type: 'function_call',
      id: itemId(responseId, 'fc', items.length),
      call_id: c.id,
      name: c.function.name,
      arguments: c.function.arguments,
      status: 'completed',
    });
  }
  return items;
}

/** The Response object (OpenAI's shape): the request's settings echoed, the output and the usage. */
export function responseObject(
  r: ResponsesRequest,
  o: { id: string; createdAt: number; model: string; status: ResponseObject['status'] },
  output: OutputItem[],
  usage: Usage | null,
  extra: Record<string, unknown> = {},
): ResponseObject {
  return {
    id: o.id,
    object: 'response',
    created_at: o.createdAt,
    status: o.status,
    error: null,
    incomplete_details: o.status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: r.instructions ?? null,
    max_output_tokens: r.max_output_tokens ?? null,
    model: o.model,
    output,
    parallel_tool_calls: r.parallel_tool_calls ?? true,
    previous_response_id: r.previous_response_id ?? null,
    reasoning: { effort: r.reasoning?.effort ?? null, summary: null },
    store: r.store ?? true,
    temperature: r.temperature ?? 1,
    text: { format: r.text?.format ?? { type: 'text' } },
    tool_choice: r.tool_choice ?? 'auto',
    tools: r.tools ?? [],
    top_p: r.top_p ?? 1,
    truncation: 'disabled',
    usage: usage && responsesUsage(usage),
    user: null,
    metadata: r.metadata ?? {},
    ...extra,
  };
}

/** The assistant's turn as a chat message, for the stored conversation. */
export function answerMessage(a: Answer): ChatMessage {
  return a.toolCalls.length
    ? { role: 'assistant', content: a.text || null, tool_calls: a.toolCalls }
    : { role: 'assistant', content: a.text };
}

export const statusOf = (a: Answer): ResponseObject['status'] =>
  a.finishReason === 'length' ? 'incomplete' : 'completed';
