import type { ChatMessage, ToolSpec } from './types.js';

// svc-local's own tokenizer (src/models/upstream/local.ts): one token a word, 4 a message. It is the
// built-in model's metering, reported as its usage like any provider's; svc never counts money with it
// (a call whose usage is missing is counted with a real tokenizer: src/models/metering/tokenizer.ts).

// A word is a run of non-space. The obvious `/\s*\S+/g` backtracks: at every position of a whitespace run
// with no word after it, `\s*` takes the rest of the run and gives it back one character at a time, so a
// run of n spaces costs n²/2 steps (100,000 spaces blocked the event loop for 12 s). `\S+` alone fails at
// once on a space and never gives back what it took, so one pass finds every word; a piece is then the
// text between the previous word's end and this word's end.
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

export { contentText };
