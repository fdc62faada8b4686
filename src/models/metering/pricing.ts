import { creditsForCostCents } from '../../billing/spend.js';

// What a call costs (CONTRACT §9): cost_cents = prompt × MODEL_PRICE_INPUT / 1e6 + completion ×
// MODEL_PRICE_OUTPUT / 1e6, debited as round(cost_cents × 1000 / 90) tokens (interface document: Token
// economics). Of the prompt, the tokens the provider says it served from its cache are priced at
// MODEL_PRICE_CACHED_INPUT instead (equal to the input price unless set, so the formula
// above is unchanged by default). And the reverse: how many completion tokens a hold can pay for (CONTRACT §8: the server
// caps max_tokens to what the balance can pay, so no balance ever goes below zero).

export interface Prices {
  /** Cents per million input tokens. */
  input: number;
  /** Cents per million output tokens. */
  output: number;
  /** Cents per million prompt tokens served from the provider's cache; at most `input` (src/config.ts). */
  cachedInput: number;
}

/** When the client sets no limit, a call may write at most this many tokens (the hold's ceiling). */
export const DEFAULT_MAX_OUTPUT_TOKENS = 16_384;

/**
 * The cost in cents. `cachedTokens` (of the prompt; 0 for a hold, which cannot know them) is already
 * clamped (cachedPromptTokens). Written as a discount off the all-input price so that with the default
 * cached price (= input) the discount is exactly 0 and the float result is the very number of the
 * contract's formula, bit for bit.
 */
export const costCents = (
  p: Prices,
  promptTokens: number,
  completionTokens: number,
  cachedTokens = 0,
): number =>
  (promptTokens * p.input - cachedTokens * (p.input - p.cachedInput)) / 1e6 +
  (completionTokens * p.output) / 1e6;

export const creditsFor = (
  p: Prices,
  promptTokens: number,
  completionTokens: number,
  cachedTokens = 0,
): number => creditsForCostCents(costCents(p, promptTokens, completionTokens, cachedTokens));

/**
 * How many of the call's prompt tokens the provider served from its cache (OpenAI chat completions:
 * usage.prompt_tokens_details.cached_tokens, in the JSON reply and in a stream's usage chunk). The
 * provider is not trusted with the price: a value that is missing, not a whole number or negative counts
 * as 0 (all-input price), one above prompt_tokens as prompt_tokens (the cached-rate floor), so the cost
 * always lies between the all-cached and the all-input price of the prompt.
 */
export function cachedPromptTokens(usage: { prompt_tokens: unknown; [k: string]: unknown }): number {
  const prompt = Number.isSafeInteger(usage.prompt_tokens) ? Math.max(0, usage.prompt_tokens as number) : 0;
  const details = usage.prompt_tokens_details;
  const cached =
    details && typeof details === 'object'
      ? (details as { cached_tokens?: unknown }).cached_tokens
      : undefined;
  if (typeof cached !== 'number' || !Number.isSafeInteger(cached) || cached < 0) return 0;
  return Math.min(cached, prompt);
}

/**
 * The most completion tokens (over all choices) `heldCredits` pays for, given the prompt's upper bound;
 * at most `wanted`: the largest r in [0, wanted] with creditsFor(prompt, r) <= heldCredits.
 *
 * The debit rounds the whole call's cost (round(cost_cents × 1000 / 90)), so a hold can pay for output
 * even when it is a little below the prompt's exact cost: estimating from the unrounded budget and only
 * stepping down refused about 41 % of prompt sizes at max_tokens 5. creditsFor is
 * non-decreasing in r, so a binary search over [0, wanted] finds the exact answer in ≤ 18 steps.
 * The whole prompt is priced at the input price here (cached tokens are known only after the call) and
 * the cached price is at most the input price, so a hold stays an upper bound of the debit.
 */
export function affordableOutput(
  p: Prices,
  promptBound: number,
  heldCredits: number,
  wanted: number,
): number {
  const fits = (r: number) => creditsFor(p, promptBound, r) <= heldCredits;
  if (!fits(0)) return 0;
  if (p.output === 0 || fits(wanted)) return wanted;
  let lo = 0; // fits
  let hi = wanted; // does not fit
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  return lo;
}
