import { errorOf, COMMON_ERRORS } from '../../http/errors.js';
import { MODEL_ERRORS } from '../errors.js';
import type { PartTokens } from '../../config.js';
import { countTokens } from './tokenizer.js';

export type { PartTokens };

// The prompt of a call as the provider bills it (CONTRACT §9 "What the reserve counts"). Two needs:
//  - an UPPER bound, to reserve before the call (CONTRACT §8: reserve the most the call can cost). A BPE
//    token is at least one byte, so the UTF-8 size of every field of the request that goes upstream bounds
//    the prompt: all message content parts, `tools`, `functions`, `tool_choice`/`function_call`, the whole
//    `response_format` — and, since the other front-ends (Responses, Messages, run steps) are turned into
//    this one request, their `instructions`, `text.format`, `system` and tools too. Every field that goes
//    upstream as the caller sent it is counted (the few that are not prompt, a `temperature` or a `stop`,
//    only make the bound a little larger), so none reaches the provider uncounted; those svc replaces (the
//    model, the user id, the stream flag) are not. Computed once, from the parsed request, before the
//    hold.
//  - a COUNT with a real tokenizer (tokenizer.ts), only for a call whose provider's usage never arrived:
//    the prompt-bearing fields' text, 4 a message for its framing, a non-text part at its configured
//    maximum.

/** OpenAI content part types → the configured kind that bounds them. */
const PART_KINDS: Record<string, keyof PartTokens> = {
  image_url: 'image',
  input_audio: 'audio',
  file: 'file',
};

/** Framing a part adds around its payload in the chat template (its JSON keys exceed it). */
const PART_OVERHEAD = 16;

/** The fields of a chat request a provider reads as prompt besides the messages (CONTRACT §9). */
const PROMPT_FIELDS = ['tools', 'functions', 'tool_choice', 'function_call', 'response_format'] as const;

/** Fields svc replaces or removes before the request goes upstream (the model forced, svc's own user id, the stream flag). */
const REPLACED = new Set(['model', 'user', 'safety_identifier', 'stream']);

/** What the bound and the count read of a request (a ChatRequest or the body sent upstream). */
export type PromptSource = { messages: unknown } & Record<string, unknown>;

const bytesOf = (value: unknown): number => Buffer.byteLength(JSON.stringify(value) ?? '');

/**
 * Upper bound of the prompt's tokens: every field of the request by its UTF-8 size (key included), the
 * messages part by part — a non-text part at its kind's configured maximum (an image's bytes say nothing
 * of its tokens: a 60-byte URL can cost thousands). Throws 400 `unsupported_content` for a part of a kind
 * not configured, and 400 `validation_error` for a request nested too deeply to measure.
 */
export function promptUpperBound(request: PromptSource, parts: PartTokens = {}): number {
  try {
    let n = 16 + messagesBound(request.messages, parts);
    for (const key of Object.keys(request)) {
      const value = request[key];
      if (value === undefined || value === null || key === 'messages' || REPLACED.has(key)) continue;
      n += key.length + 4 + bytesOf(value);
    }
    return n;
  } catch (err) {
    // JSON.stringify recurses: a body nested deeper than the stack (inside a content part, a tool's
    // schema) throws RangeError. The caller's mistake, never a 500.
    if (err instanceof RangeError) {
      throw errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', 'messages: the request is nested too deeply', {
        param: 'messages',
      });
    }
    throw err;
  }
}

function messagesBound(messages: unknown, parts: PartTokens): number {
  if (!Array.isArray(messages)) return bytesOf(messages);
  let n = 0;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i] as { content?: unknown } | null;
    if (!m || typeof m !== 'object' || !Array.isArray(m.content)) {
      n += bytesOf(m);
      continue;
    }
    n += bytesOf({ ...m, content: [] });
    m.content.forEach((part: unknown, j: number) => {
      n += partBound(part, parts, i, j);
    });
  }
  return n;
}

const partKind = (part: unknown): keyof PartTokens | 'text' | undefined => {
  const type = (part as { type?: unknown } | null)?.type;
  if (type === 'text' || type === 'refusal') return 'text';
  return typeof type === 'string' ? PART_KINDS[type] : undefined;
};

function partBound(part: unknown, parts: PartTokens, i: number, j: number): number {
  const kind = partKind(part);
  if (kind === 'text') return bytesOf(part);
  const max = kind ? parts[kind] : undefined;
  if (max === undefined) {
    const type = (part as { type?: unknown } | null)?.type;
    throw errorOf(
      MODEL_ERRORS,
      'UNSUPPORTED_CONTENT',
      `messages[${i}].content[${j}]: content parts of type '${String(type)}' are not accepted by this server's model`,
      { param: `messages.${i}.content.${j}.type` },
    );
  }
  return max + PART_OVERHEAD;
}

const textOf = (v: unknown): string => (typeof v === 'string' ? v : '');

interface CountedMessage {
  content?: unknown;
  name?: unknown;
  tool_calls?: { function?: { name?: unknown; arguments?: unknown } }[];
}

/**
 * The prompt counted with the tokenizer, for a call the provider received whose usage never arrived
 * (CONTRACT §9): 2 for the reply's priming, 4 a message for its role and framing, the tokens of every
 * text it carries (content parts, names, tool calls) and of every other prompt-bearing field as sent
 * (JSON), a non-text part at its kind's configured maximum. Never more than the upper bound.
 */
export async function promptTokenCount(request: PromptSource, parts: PartTokens = {}): Promise<number> {
  const texts: string[] = [];
  let n = 2;
  const messages = Array.isArray(request.messages) ? (request.messages as (CountedMessage | null)[]) : [];
  for (const m of messages) {
    n += 4;
    if (!m || typeof m !== 'object') continue;
    if (typeof m.name === 'string') texts.push(m.name);
    if (typeof m.content === 'string') texts.push(m.content);
    else if (Array.isArray(m.content)) {
      for (const part of m.content as { text?: unknown; refusal?: unknown }[]) {
        const kind = partKind(part);
        if (kind === 'text') texts.push(textOf(part.text) || textOf(part.refusal));
        else if (kind) n += parts[kind] ?? 0;
      }
    }
    for (const call of m.tool_calls ?? [])
      texts.push(textOf(call.function?.name), textOf(call.function?.arguments));
  }
  for (const field of PROMPT_FIELDS) {
    const value = request[field];
    if (value !== undefined && value !== null) texts.push(JSON.stringify(value));
  }
  return n + (await countTokens(texts.join('\n')));
}
