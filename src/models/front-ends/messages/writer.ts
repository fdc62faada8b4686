import { randomBytes } from 'node:crypto';
import type { Deps } from '../../../deps.js';
import { renderError } from '../../../http/error-middleware.js';
import type { AppError } from '../../../http/errors.js';
import type { CallWriter } from '../../call.js';
import type { ChatChunk, ChatCompletion, Usage } from '../../upstream/types.js';
import { messagesUsage, stopReason, toolInput } from './translate.js';

// The Messages API's wire format for one call: an Anthropic message (JSON), or its event stream
// (`event: <type>` + `data: {type, …}`): message_start, per content block content_block_start, its
// deltas (text_delta, input_json_delta) and content_block_stop, then message_delta with the stop reason
// and the usage billed, and message_stop. A failure is an `error` event in Anthropic's error shape.

export function messagesWriter(deps: Deps): CallWriter {
  const id = `msg_${randomBytes(12).toString('hex')}`;
  const model = deps.models.modelId;
  const event = (type: string, payload: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...payload })}\n\n`;

  // The stream's state: the block open (its index, and for a tool call the chat call's index).
  let blocks = 0;
  let open: { index: number; kind: 'text' } | { index: number; kind: 'tool'; call: number } | null = null;
  const toolBlocks = new Map<number, number>();
  let finish: string | null = null;

  function close(): string {
    if (!open) return '';
    const index = open.index;
    open = null;
    return event('content_block_stop', { index });
  }

  return {
    json(completion: ChatCompletion, usage: Usage) {
      const choice = completion.choices[0];
      const text = choice?.message.content ?? '';
      const calls = choice?.message.tool_calls ?? [];
      return {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content: [
          ...(text || calls.length === 0 ? [{ type: 'text', text }] : []),
          ...calls.map((c) => ({
            type: 'tool_use',
            id: c.id,
            name: c.function.name,
            input: toolInput(c.function.arguments),
          })),
        ],
        stop_reason: stopReason(choice?.finish_reason ?? null),
        stop_sequence: null,
        usage: messagesUsage(usage),
      };
    },

    open() {
      const message = {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        // The prompt's count comes with message_delta, once the provider reported it.
        usage: { input_tokens: 0, output_tokens: 0 },
      };
      return event('message_start', { message });
    },

    chunk(chunk: ChatChunk) {
      const choice = chunk.choices?.find((c) => c.index === 0);
      if (!choice) return '';
      let out = '';
      const d = choice.delta ?? {};
      if (typeof d.content === 'string' && d.content) {
        if (open?.kind !== 'text') {
          out += close();
          open = { index: blocks++, kind: 'text' };
          out += event('content_block_start', {
            index: open.index,
            content_block: { type: 'text', text: '' },
          });
        }
        out += event('content_block_delta', {
          index: open.index,
          delta: { type: 'text_delta', text: d.content },
        });
      }
      for (const tc of d.tool_calls ?? []) {
        let index = toolBlocks.get(tc.index);
        if (index === undefined) {
          out += close();
          index = blocks++;
          toolBlocks.set(tc.index, index);
          open = { index, kind: 'tool', call: tc.index };
          const content_block = {
            type: 'tool_use',
            id: tc.id ?? `toolu_${id.slice(4, 16)}_${index}`,
            name: tc.function?.name ?? '',
            input: {},
          };
          out += event('content_block_start', { index, content_block });
        }
        const partial = tc.function?.arguments ?? '';
        // A block's deltas come while it is open; a provider going back to an earlier call has its
        // arguments dropped rather than sent to a closed block (chat streams one call at a time).
        if (partial && open?.index === index)
          out += event('content_block_delta', {
            index,
            delta: { type: 'input_json_delta', partial_json: partial },
          });
      }
      if (choice.finish_reason) finish = choice.finish_reason;
      return out;
    },

    end(usage: Usage) {
      return (
        close() +
        event('message_delta', {
          delta: { stop_reason: stopReason(finish), stop_sequence: null },
          usage: messagesUsage(usage),
        }) +
        event('message_stop', {})
      );
    },

    fail: (err: AppError) => event('error', renderError(err, 'anthropic') as Record<string, unknown>),
  };
}
