import { countText } from './tokens.js';
import type { ChatChunk, ChatCompletion, ToolCall, Usage } from './upstream/types.js';

// What a call produced, counted as CONTRACT §8 bills a reply whose provider never reported usage: one
// token per content piece at least, svc's own count of the prompt.

/** Usage from svc's own counts, for a call whose provider never reported it. */
export const countedUsage = (prompt: number, completion: number): Usage => ({
  prompt_tokens: prompt,
  completion_tokens: completion,
  total_tokens: prompt + completion,
});

/** A JSON reply's output as the stream meter counts it: each content and each tool call's arguments. */
export function completionTokensOf(completion: ChatCompletion): number {
  let n = 0;
  for (const choice of completion.choices ?? []) {
    const content = choice.message?.content;
    if (typeof content === 'string' && content) n += Math.max(1, countText(content));
    for (const tc of choice.message?.tool_calls ?? [])
      n += Math.max(1, countText(tc.function?.arguments ?? ''));
  }
  return n;
}

/**
 * Watches a stream: keeps the provider's usage, counts what was generated (for a stream the client left
 * before the usage chunk), forces the model id, and assembles the assistant message (for runs).
 */
export class StreamMeter {
  usage: Usage | null = null;
  generated = 0;
  content = '';
  finishReason: string | null = null;
  private calls: { id: string; name: string; arguments: string }[] = [];

  constructor(private readonly modelId: string) {}

  /** Returns the chunk to forward (model forced), or null when it is the usage chunk the client did not ask for. */
  observe(chunk: ChatChunk, forwardUsage: boolean): ChatChunk | null {
    if (chunk.usage) this.usage = chunk.usage;
    for (const choice of chunk.choices ?? []) {
      const d = choice.delta ?? {};
      if (typeof d.content === 'string' && d.content) {
        this.generated += Math.max(1, countText(d.content));
        if (choice.index === 0) this.content += d.content;
      }
      for (const tc of d.tool_calls ?? []) {
        const args = tc.function?.arguments ?? '';
        if (args || tc.function?.name) this.generated += Math.max(1, countText(args));
        if (choice.index !== 0) continue;
        const slot = (this.calls[tc.index] ??= { id: '', name: '', arguments: '' });
        if (tc.id) slot.id = tc.id;
        if (tc.function?.name) slot.name += tc.function.name;
        slot.arguments += args;
      }
      if (choice.finish_reason && choice.index === 0) this.finishReason = choice.finish_reason;
    }
    chunk.model = this.modelId;
    if (!forwardUsage) {
      if (chunk.usage && (!chunk.choices || chunk.choices.length === 0)) return null;
      delete chunk.usage;
    }
    return chunk;
  }

  toolCalls(): ToolCall[] {
    // Some providers omit ids on streamed calls: a run needs one to match the client's tool_result.
    return this.calls
      .map(
        (c, i) =>
          c && {
            id: c.id || `call_${i}_${this.content.length}`,
            type: 'function' as const,
            function: { name: c.name, arguments: c.arguments },
          },
      )
      .filter((c): c is ToolCall => !!c);
  }

  /** The provider's usage, or our count of what streamed when it never came. */
  finalUsage(promptEstimate: () => number): { usage: Usage; estimated: boolean } {
    if (this.usage) return { usage: this.usage, estimated: false };
    return { usage: countedUsage(promptEstimate(), this.generated), estimated: true };
  }
}
