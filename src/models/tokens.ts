import { AppError } from '../http/errors.js';
import type { ChatMessage, ToolSpec } from './upstream/types.js';
import type { PartTokens } from '../config.js';

export type { PartTokens };

// Token arithmetic the proxy does itself. Two different needs:
//  - an UPPER bound of the prompt, to reserve before the call (CONTRACT §8: reserve the most the call can
//    cost). A BPE token is at least one byte, so the UTF-8 size of the serialized messages and tools
//    (whose quoting and keys exceed the chat template's per-message overhead) bounds the prompt.
//  - a deterministic COUNT, used by the built-in model as its tokenizer and, for a provider stream the
//    client abandoned before the usage chunk, as the estimate of what was consumed.

// A word is a run of non-space. The obvious `/\s*\S+/g` backtracks: at every position of a whitespace run
// with no word after it, `\s*` takes the rest of the run and gives it back one character at a time, so a
// run of n spaces costs n²/2 steps (100,000 spaces blocked the event loop for 12 s). `\S+` alone fails at
// once on a space and never gives back what it took, so one pass finds every word; a piece is then the
// text between the previous word's end and this word's end. Issue 22 item 1.
const WORD = /\S+/g;

/** The pieces a text streams as (one word with its leading space per piece); trailing space is dropped. */
export function textPieces(text: string): string[] {
  const pieces: string[] = [];
  let from = 0;
  for (const word of text.matchAll(WORD)) {
    const end = word.index + word[0].length;
    pieces.push(text.slice(from, end));
    from = end;
  }
  return pieces;
}

/** How many pieces `textPieces` would give, without building them. */
export function countText(text: string): number {
  let n = 0;
  for (const _word of text.matchAll(WORD)) n++;
  return n;
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((p) =>
        p && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string'
          ? (p as { text: string }).text
          : '',
      )
      .join(' ');
  }
  return '';
}

/** Deterministic prompt count: 4 per message (role and framing) + the words of contents and tool calls + tools. */
export function countPrompt(messages: ChatMessage[], tools: ToolSpec[] | undefined): number {
  let n = 2;
  for (const m of messages) {
    n += 4 + countText(contentText(m.content));
    for (const call of m.tool_calls ?? [])
      n += 2 + countText(call.function?.name ?? '') + countText(call.function?.arguments ?? '');
  }
  if (tools?.length) n += countText(JSON.stringify(tools).replace(/[{}[\]",:]/g, ' '));
  return n;
}

/** OpenAI content part types → the configured kind that bounds them. */
const PART_KINDS: Record<string, keyof PartTokens> = {
  image_url: 'image',
  input_audio: 'audio',
  file: 'file',
};

/** Framing a part adds around its payload in the chat template (its JSON keys exceed it). */
const PART_OVERHEAD = 16;

const bytesOf = (value: unknown): number => Buffer.byteLength(JSON.stringify(value) ?? '');

/**
 * Upper bound of the prompt's tokens. Text (and every other field) by its UTF-8 size, since a byte-level
 * BPE token is at least one byte; a non-text part at its kind's configured maximum (an image's bytes say
 * nothing of its tokens: a 60-byte URL can cost thousands). Throws 400 `unsupported_content` for a part
 * of a kind not configured, and 400 `validation_error` for a request nested too deeply to measure.
 */
export function promptUpperBound(messages: unknown, tools: unknown, parts: PartTokens = {}): number {
  try {
    let n = 16 + (tools ? bytesOf(tools) : 0);
    if (!Array.isArray(messages)) return n + bytesOf(messages);
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
  } catch (err) {
    // JSON.stringify recurses: a body nested deeper than the stack (inside a content part, a tool's
    // schema) throws RangeError. The caller's mistake, never a 500 (issue 22 item 3).
    if (err instanceof RangeError) {
      throw new AppError(400, 'VALIDATION_ERROR', 'messages: the request is nested too deeply', {
        param: 'messages',
      });
    }
    throw err;
  }
}

function partBound(part: unknown, parts: PartTokens, i: number, j: number): number {
  const type = (part as { type?: unknown } | null)?.type;
  if (type === 'text' || type === 'refusal') return bytesOf(part);
  const kind = typeof type === 'string' ? PART_KINDS[type] : undefined;
  const max = kind ? parts[kind] : undefined;
  if (max === undefined) {
    throw new AppError(
      400,
      'unsupported_content',
      `messages[${i}].content[${j}]: content parts of type '${String(type)}' are not accepted by this server's model`,
      { param: `messages.${i}.content.${j}.type` },
    );
  }
  return max + PART_OVERHEAD;
}

export { contentText };
