import type { Deps } from '../../../deps.js';
import type { AppError } from '../../../http/errors.js';
import type { CallWriter } from '../../call.js';
import type { PreparedCall } from '../../metering/metered.js';
import type { ChatChunk, ChatCompletion, ChatMessage, Usage } from '../../upstream/types.js';
import type { ResponsesRequest } from './schema.js';
import { saveStored } from './store.js';
import {
  answerMessage,
  itemId,
  newResponseId,
  outputItems,
  responseObject,
  statusOf,
  type Answer,
  type OutputItem,
  type ResponseObject,
} from './translate.js';

// The Responses API's wire format for one call: a Response object (JSON), or its event stream
// (`event: <type>` + `data: {type, sequence_number, …}`): response.created, response.in_progress, per
// output item response.output_item.added / .done, text as response.output_text.delta, a function call's
// arguments as response.function_call_arguments.delta, then response.completed (or response.incomplete
// when max_output_tokens cut it) with the usage billed; a failure is `error` then response.failed.
// With `store` (the default) the response is kept before its last event leaves (store.ts).

export function responsesWriter(
  deps: Deps,
  r: ResponsesRequest,
  conversation: ChatMessage[],
  call: PreparedCall,
): CallWriter {
  const id = newResponseId();
  const head = { id, createdAt: Math.floor(Date.now() / 1000), model: deps.models.modelId };
  const response = (status: ResponseObject['status'], output: OutputItem[], usage: Usage | null) =>
    responseObject(r, { ...head, status }, output, usage);

  /** Keeps the response when asked (the default); the answer goes out even when the write fails. */
  async function keep(answer: Answer, final: ResponseObject) {
    if (r.store === false) return;
    const { orgKey, userId } = call.actor;
    const messages = [...conversation, answerMessage(answer)];
    await saveStored(deps.db, { id, orgKey, userId, messages, response: final }).catch((err: unknown) =>
      deps.log.error({ err, requestId: call.requestId }, 'stored response not written'),
    );
  }

  let seq = 0;
  const event = (type: string, payload: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...payload })}\n\n`;

  // The stream's state: the items in output order, the message item open for text, the calls by index.
  const items: OutputItem[] = [];
  let message: { index: number; text: string } | null = null;
  const calls: { index: number; item: OutputItem & { type: 'function_call' }; open: boolean }[] = [];
  let text = '';
  let finishReason: string | null = null;

  function openMessage(): string {
    if (message) return '';
    const index = items.length;
    message = { index, text: '' };
    const item: OutputItem = {
      type: 'message',
      id: itemId(id, 'msg', index),
      status: 'in_progress',
      role: 'assistant',
      content: [],
    };
    items.push(item);
    return (
      event('response.output_item.added', { output_index: index, item }) +
      event('response.content_part.added', {
        item_id: item.id,
        output_index: index,
        content_index: 0,
        part: { type: 'output_text', text: '', annotations: [] },
      })
    );
  }

  function closeMessage(): string {
    if (!message) return '';
    const { index, text: done } = message;
    message = null;
    const part = { type: 'output_text' as const, text: done, annotations: [] };
    const item: OutputItem = { ...(items[index] as OutputItem & { type: 'message' }), status: 'completed' };
    item.content = [part];
    items[index] = item;
    const at = { item_id: item.id, output_index: index, content_index: 0 };
    return (
      event('response.output_text.done', { ...at, text: done, logprobs: [] }) +
      event('response.content_part.done', { ...at, part }) +
      event('response.output_item.done', { output_index: index, item })
    );
  }

  function closeCalls(): string {
    let out = '';
    for (const c of calls) {
      if (!c.open) continue;
      c.open = false;
      c.item.status = 'completed';
      items[c.index] = { ...c.item };
      out +=
        event('response.function_call_arguments.done', {
          item_id: c.item.id,
          output_index: c.index,
          name: c.item.name,
          arguments: c.item.arguments,
        }) + event('response.output_item.done', { output_index: c.index, item: items[c.index] });
    }
    return out;
  }

  function streamedAnswer(): Answer {
    return {
      text,
      finishReason,
      toolCalls: calls.map((c) => ({
        id: c.item.call_id,
        type: 'function' as const,
        function: { name: c.item.name, arguments: c.item.arguments },
      })),
    };
  }

  return {
    async json(completion: ChatCompletion, usage: Usage) {
      const choice = completion.choices[0];
      const answer: Answer = {
        text: choice?.message.content ?? '',
        toolCalls: choice?.message.tool_calls ?? [],
        finishReason: choice?.finish_reason ?? null,
      };
      const final = response(statusOf(answer), outputItems(id, answer), usage);
      await keep(answer, final);
      return final;
    },

    open() {
      const skeleton = response('in_progress', [], null);
      return (
        event('response.created', { response: skeleton }) +
        event('response.in_progress', { response: skeleton })
      );
    },

    chunk(chunk: ChatChunk) {
      const choice = chunk.choices?.find((c) => c.index === 0);
      if (!choice) return '';
      let out = '';
      const d = choice.delta ?? {};
      if (typeof d.content === 'string' && d.content) {
        out += openMessage();
        message!.text += d.content;
        text += d.content;
        out += event('response.output_text.delta', {
          item_id: itemId(id, 'msg', message!.index),
          output_index: message!.index,
          content_index: 0,
          delta: d.content,
          logprobs: [],
        });
      }
      for (const tc of d.tool_calls ?? []) {
        let c = calls[tc.index];
        if (!c) {
          out += closeMessage();
          const index = items.length;
          const item = {
            type: 'function_call' as const,
            id: itemId(id, 'fc', index),
            call_id: tc.id ?? `call_${index}_${id.slice(-8)}`,
            name: tc.function?.name ?? '',
            arguments: '',
            status: 'in_progress' as const,
          };
          c = calls[tc.index] = { index, item, open: true };
          items.push({ ...item });
          out += event('response.output_item.added', { output_index: index, item });
        }
        const delta = tc.function?.arguments ?? '';
        if (!delta) continue;
        c.item.arguments += delta;
        out += event('response.function_call_arguments.delta', {
          item_id: c.item.id,
          output_index: c.index,
          delta,
        });
      }
      if (choice.finish_reason) finishReason = choice.finish_reason;
      return out;
    },

    async end(usage: Usage) {
      const closing = closeMessage() + closeCalls();
      const answer = streamedAnswer();
      const status = statusOf(answer);
      const final = response(status, items, usage);
      await keep(answer, final);
      const type = status === 'incomplete' ? 'response.incomplete' : 'response.completed';
      return closing + event(type, { response: final });
    },

    fail(err: AppError) {
      const error = { code: err.code.toLowerCase(), message: err.message };
      return (
        event('error', { ...error, param: err.extra.param ?? null }) +
        event('response.failed', { response: { ...response('failed', items, null), error } })
      );
    },
  };
}
