import { CREDITS_PER_CENT } from '../billing/service.js';

// How the pages name the two kinds of token (docs/portal.md "Tokens and money"): svc's tokens, the
// interface document's only currency, always with their money beside them at par (1,000 tokens = 1 US
// dollar: interface document, Token economics), and a model's tokens, always called model tokens.

const whole = new Intl.NumberFormat('en-US');
// At par one token is a tenth of a cent: three decimals are exact, two are shown when the third is 0.
const dollars = new Intl.NumberFormat('en-US', {
  style: 'currency',
  currency: 'USD',
  minimumFractionDigits: 2,
  maximumFractionDigits: 3,
});

/** 920 → "$0.92"; 1 → "$0.001"; −12 → "-$0.012": what `tokens` svc tokens are worth at par, exactly. */
export function usdOfTokens(tokens: number): string {
  return dollars.format(tokens / (100 * CREDITS_PER_CENT));
}

/** 920 → "920 tokens · $0.92". */
export function tokensAndMoney(tokens: number): string {
  return `${whole.format(tokens)} ${Math.abs(tokens) === 1 ? 'token' : 'tokens'} · ${usdOfTokens(tokens)}`;
}

/** 36, 48 → "36 input + 48 output model tokens". */
export function modelTokens(input: number, output: number): string {
  return `${whole.format(input)} input + ${whole.format(output)} output model tokens`;
}
