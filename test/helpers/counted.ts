import { countTokens } from '../../src/models/metering/tokenizer.js';
import { promptTokenCount, type PromptSource } from '../../src/models/metering/tokens.js';
import type { PartTokens } from '../../src/config.js';

// What svc bills a call whose provider's usage never came (CONTRACT §9): the prompt of the body the
// provider got and the delivered output, both counted with the tokenizer svc uses (o200k_base). With the
// fake provider's prices (FakeUpstream.env) a call debits prompt + 2 × completion tokens.

export async function countedCall(
  providerBody: unknown,
  delivered: string,
  parts: PartTokens = {},
): Promise<{ prompt: number; completion: number; debit: number }> {
  const body = providerBody as PromptSource & {
    max_tokens?: number;
    max_completion_tokens?: number;
    n?: number;
  };
  const prompt = await promptTokenCount(body, parts);
  // Never more output than the call let the provider write (its capped limit × n).
  const cap = (body.max_completion_tokens ?? body.max_tokens ?? Infinity) * (body.n ?? 1);
  const completion = Math.min(cap, await countTokens(delivered));
  return { prompt, completion, debit: prompt + 2 * completion };
}
