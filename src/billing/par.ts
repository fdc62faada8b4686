// svc tokens at par (interface document, Token economics): 1 unit of currency = 1,000 tokens, so one cent
// is 10 tokens. A leaf module, so every face that names an amount — the pages, the terminal client —
// says it the same way (docs/portal.md "Tokens and money") without loading the billing service.

/** 1 unit of currency = 1,000 tokens, so one cent = 10 tokens. */
export const CREDITS_PER_CENT = 10;

// Made at first use: loading ICU's number formats costs a terminal command tens of milliseconds at
// start, and most commands name no amount.
let formats: { whole: Intl.NumberFormat; dollars: Intl.NumberFormat } | undefined;
const formatsOf = () =>
  (formats ??= {
    whole: new Intl.NumberFormat('en-US'),
    // At par one token is a tenth of a cent: three decimals are exact, two are shown when the third is 0.
    dollars: new Intl.NumberFormat('en-US', {
      style: 'currency',
      currency: 'USD',
      minimumFractionDigits: 2,
      maximumFractionDigits: 3,
    }),
  });

/** 920 → "$0.92"; 1 → "$0.001"; −12 → "-$0.012": what `tokens` svc tokens are worth at par, exactly. */
export function usdOfTokens(tokens: number): string {
  return formatsOf().dollars.format(tokens / (100 * CREDITS_PER_CENT));
}

/** 2500 → "$25.00": an amount of money in US cents, as every page and mail shows money. */
export function usdOfCents(cents: number): string {
  return usdOfTokens(cents * CREDITS_PER_CENT);
}

/** 920 → "920 tokens · $0.92". */
export function tokensAndMoney(tokens: number): string {
  return `${formatsOf().whole.format(tokens)} ${Math.abs(tokens) === 1 ? 'token' : 'tokens'} · ${usdOfTokens(tokens)}`;
}
