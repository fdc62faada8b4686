import type { ServerResponse } from 'node:http';
import type { ResponseCreateParamsBase } from 'openai/resources/responses/responses';
import { contentChunkGoes, type StreamFaultKnobs } from './fake-stream-faults.js';

// The fake provider's own Responses API (POST /v1/responses, JSON and its event stream), for svc's
// pass-through (MODEL_UPSTREAM_API=responses). The same knobs as its chat completions (delays, a status
// failure, a stream broken or stalled after N text deltas, no usage) and the same exact accounting:
// output_tokens = words streamed (one delta per word) + 5 per function call + the reply's reasoning
// tokens; input_tokens = `promptTokens` (default 10); cached_tokens when the reply sets it.

export interface FakeReply {
  content?: string;
  toolCalls?: { name: string; arguments: string }[];
  promptTokens?: number;
  /**
   * Sent as usage.prompt_tokens_details.cached_tokens (OpenAI's cached prompt tokens), as given: a test of
   * hostile providers passes negatives, fractions, strings or more than the prompt.
   */
  cachedTokens?: unknown;
  /** Responses API only: a reasoning item first, and these tokens in output_tokens (its details too). */
  reasoningTokens?: number;
}

/** The fake provider's knobs and records this API reads (FakeUpstream has them all). */
export interface ResponsesKnobs extends StreamFaultKnobs {
  requests: unknown[];
  responsesRequests: unknown[];
  responsesReply: (body: ResponsesBody) => FakeReply;
  endDelayMs: number;
  omitUsage: boolean;
  /**
   * How a Responses stream ends after its text: `completed` (the default: response.completed or
   * .incomplete), `failed` (an `error` event then response.failed, as a provider reports its own failure),
   * `cut` (the body ends with no last event).
   */
  responsesEnding: 'completed' | 'failed' | 'cut';
  /** Bill input_tokens from every prompt-bearing field (`fieldPrompt`), as a real provider does. */
  promptFromFields: boolean;
}

/** What a client sends to POST /v1/responses, as the openai SDK types it. */
export type ResponsesBody = ResponseCreateParamsBase;

const words = (text: string): string[] => text.match(/\s*\S+/g) ?? [];

export async function answerResponses(
  state: ResponsesKnobs,
  body: ResponsesBody,
  res: ServerResponse,
  fieldPrompt: number,
): Promise<void> {
  const n = state.requests.length + state.responsesRequests.length;
  const reply: FakeReply = state.responsesReply(body);
  const limit = body.max_output_tokens ?? Infinity;
  let pieces = words(reply.content ?? '');
  let cut = false;
  if (pieces.length > limit) {
    pieces = pieces.slice(0, limit);
    cut = true;
  }
  const calls = (reply.toolCalls ?? []).map((t, i) => ({ ...t, call_id: `call_fake_${n}_${i}` }));
  const reasoning = reply.reasoningTokens ?? 0;
  const prompt = state.promptFromFields ? fieldPrompt : (reply.promptTokens ?? 10);
  const output = pieces.length + 5 * calls.length + reasoning;
  const usage = {
    input_tokens: prompt,
    input_tokens_details: { cached_tokens: reply.cachedTokens ?? 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: reasoning },
    total_tokens: prompt + output,
  };
  const id = `resp_fake${n}`;
  const skeleton = {
    id,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    model: 'provider-model-2026-01-01',
    status: 'in_progress',
    output: [] as unknown[],
    usage: null as unknown,
    store: body.store ?? true,
    instructions: body.instructions ?? null,
  };
  const items: Record<string, unknown>[] = [];
  if (reasoning) items.push({ type: 'reasoning', id: `rs_fake${n}`, summary: [] });
  const message = {
    type: 'message',
    id: `msg_fake${n}`,
    status: 'completed',
    role: 'assistant',
    content: [{ type: 'output_text', text: pieces.join(''), annotations: [] }],
  };
  if (pieces.length || !calls.length) items.push(message);
  for (const c of calls)
    items.push({
      type: 'function_call',
      id: `fc_fake${n}_${c.call_id}`,
      call_id: c.call_id,
      name: c.name,
      arguments: c.arguments,
      status: 'completed',
    });
  const status = cut ? 'incomplete' : 'completed';
  const final = {
    ...skeleton,
    status,
    output: items,
    incomplete_details: cut ? { reason: 'max_output_tokens' } : null,
    usage: state.omitUsage ? null : usage,
  };

  if (!body.stream) {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(final));
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  let seq = 0;
  const send = (type: string, payload: Record<string, unknown>) =>
    res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...payload })}\n\n`);
  send('response.created', { response: skeleton });
  send('response.in_progress', { response: skeleton });
  let sent = 0;
  for (const [index, item] of items.entries()) {
    if (item.type === 'reasoning') {
      send('response.output_item.added', { output_index: index, item });
      send('response.output_item.done', { output_index: index, item });
    } else if (item.type === 'message') {
      const at = { item_id: item.id, output_index: index, content_index: 0 };
      send('response.output_item.added', {
        output_index: index,
        item: { ...item, content: [], status: 'in_progress' },
      });
      send('response.content_part.added', {
        ...at,
        part: { type: 'output_text', text: '', annotations: [] },
      });
      for (const piece of pieces) {
        if (!(await contentChunkGoes(state, res, sent))) return;
        send('response.output_text.delta', { ...at, delta: piece, logprobs: [] });
        sent++;
      }
      send('response.output_text.done', { ...at, text: pieces.join(''), logprobs: [] });
      send('response.content_part.done', { ...at, part: message.content[0] });
      send('response.output_item.done', { output_index: index, item });
    } else {
      const at = { item_id: item.id, output_index: index };
      send('response.output_item.added', {
        output_index: index,
        item: { ...item, arguments: '', status: 'in_progress' },
      });
      send('response.function_call_arguments.delta', { ...at, delta: item.arguments });
      send('response.function_call_arguments.done', { ...at, arguments: item.arguments });
      send('response.output_item.done', { output_index: index, item });
    }
  }
  const last = () => {
    if (state.responsesEnding === 'failed') {
      send('error', { code: 'server_error', message: 'The model failed', param: null });
      send('response.failed', { response: { ...final, status: 'failed', usage: null } });
    } else if (state.responsesEnding === 'completed')
      send(cut ? 'response.incomplete' : 'response.completed', { response: final });
    res.end();
  };
  if (state.endDelayMs > 0)
    setTimeout(last, state.endDelayMs); // the scenario knob: a late end of the body
  else last();
}
