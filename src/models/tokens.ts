import type { ChatMessage, ToolSpec } from './upstream/types.js';

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

/** Upper bound of the prompt's tokens for any byte-level BPE tokenizer. */
export function promptUpperBound(messages: unknown, tools: unknown): number {
  return (
    Buffer.byteLength(JSON.stringify(messages)) + (tools ? Buffer.byteLength(JSON.stringify(tools)) : 0) + 16
  );
}

export { contentText };
