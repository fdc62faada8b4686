import { countTokens } from './tokenizer.js';
import type { ChatChunk, ChatCompletion, ToolCall, Usage } from '../upstream/types.js';

// What a call produced, counted as CONTRACT §8–§9 bill a reply whose provider never reported usage: the
// prompt and the delivered output (every content and every tool call's name and arguments) with the
// tokenizer (tokenizer.ts), the output never above what the call let the provider write.

/** What a call whose usage is missing is billed: the tokenizer's counts (see PreparedCall). */
export async function countedUsage(
  call: { promptTokens: () => Promise<number>; outputCap: number },
  delivered: string,
): Promise<Usage> {
  const prompt = await call.promptTokens();
  const completion = Math.min(call.outputCap, await countTokens(delivered));
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

/** A JSON reply's output as the stream meter keeps it: each content and each tool call's name and arguments. */
export function deliveredTextOf(completion: ChatCompletion): string {
  const texts: string[] = [];
  for (const choice of completion.choices ?? []) {
    const content = choice.message?.content;
    if (typeof content === 'string' && content) texts.push(content);
    for (const tc of choice.message?.tool_calls ?? [])
      texts.push(tc.function?.name ?? '', tc.function?.arguments ?? '');
  }
  return texts.join('\n');
}

/**
 * Watches a stream: keeps the provider's usage, counts what was generated (for a stream the client left
 * before the usage chunk), forces the model id, and assembles the assistant message (for runs).
 */
export class StreamMeter {
  usage: Usage | null = null;
  /** What the provider sent of output (every choice's content, tool names and arguments), kept as text. */
  private output: string[] = [];
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
        this.output.push(d.content);
        if (choice.index === 0) this.content += d.content;
      }
      for (const tc of d.tool_calls ?? []) {
        const args = tc.function?.arguments ?? '';
        if (tc.function?.name) this.output.push(tc.function.name);
        if (args) this.output.push(args);
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

  /** Whether any output came (a provider failing after this is billed for it; before, nothing). */
  get delivered(): boolean {
    return this.output.length > 0;
  }

  /** The provider's usage, or the tokenizer's count of the prompt and of what streamed when it never came. */
  async finalUsage(call: Parameters<typeof countedUsage>[0]): Promise<{ usage: Usage; estimated: boolean }> {
    if (this.usage) return { usage: this.usage, estimated: false };
    return { usage: await countedUsage(call, this.output.join('')), estimated: true };
  }
}
