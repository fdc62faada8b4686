import { creditsForCostCents } from '../billing/spend.js';

// What a call costs (CONTRACT §9): cost_cents = prompt × MODEL_PRICE_INPUT / 1e6 + completion ×
// MODEL_PRICE_OUTPUT / 1e6, debited as round(cost_cents × 1000 / 90) tokens (interface document: Token
// economics). And the reverse: how many completion tokens a hold can pay for (CONTRACT §8: the server
// caps max_tokens to what the balance can pay, so no balance ever goes below zero).

export interface Prices {
  /** Cents per million input tokens. */
  input: number;
  /** Cents per million output tokens. */
  output: number;
}

/** When the client sets no limit, a call may write at most this many tokens (the hold's ceiling). */
export const DEFAULT_MAX_OUTPUT_TOKENS = 16_384;

export const costCents = (p: Prices, promptTokens: number, completionTokens: number): number =>
  (promptTokens * p.input) / 1e6 + (completionTokens * p.output) / 1e6;

export const creditsFor = (p: Prices, promptTokens: number, completionTokens: number): number =>
  creditsForCostCents(costCents(p, promptTokens, completionTokens));

/**
 * The most completion tokens (over all choices) `heldCredits` pays for, given the prompt's upper bound;
 * at most `wanted`. The result r satisfies creditsFor(prompt, r) <= heldCredits.
 */
export function affordableOutput(
  p: Prices,
  promptBound: number,
  heldCredits: number,
  wanted: number,
): number {
  if (p.output === 0) return creditsFor(p, promptBound, 0) <= heldCredits ? wanted : 0;
  // Without rounding slack: cost_cents <= held × 0.09 is enough for round(cost × 1000 / 90) <= held.
  const budgetCents = (heldCredits * 90) / 1000 - (promptBound * p.input) / 1e6;
  let n = Math.min(wanted, Math.max(0, Math.floor((budgetCents * 1e6) / p.output) + 1));
  // Floating point: step down until the exact formula agrees (a few steps at most).
  while (n > 0 && creditsFor(p, promptBound, n) > heldCredits) n--;
  return n;
}
