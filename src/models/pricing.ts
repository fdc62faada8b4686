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
 * at most `wanted`: the largest r in [0, wanted] with creditsFor(prompt, r) <= heldCredits.
 *
 * The debit rounds the whole call's cost (round(cost_cents × 1000 / 90)), so a hold can pay for output
 * even when it is a little below the prompt's exact cost: estimating from the unrounded budget and only
 * stepping down refused about 41 % of prompt sizes at max_tokens 5 (issue 21 item 7). creditsFor is
 * non-decreasing in r, so a binary search over [0, wanted] finds the exact answer in ≤ 18 steps.
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
