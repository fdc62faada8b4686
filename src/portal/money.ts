// How the pages name the two kinds of token (docs/portal.md "Tokens and money"): svc's tokens, the
// interface document's only currency, always with their money beside them at par (1,000 tokens = 1 US
// dollar: interface document, Token economics), and a model's tokens, always called model tokens.

export { tokensAndMoney, usdOfTokens } from '../billing/par.js';

const whole = new Intl.NumberFormat('en-US');

/** 36, 48 → "36 input + 48 output model tokens". */
export function modelTokens(input: number, output: number): string {
  return `${whole.format(input)} input + ${whole.format(output)} output model tokens`;
}
