// The tokenizer svc counts with when a provider's usage never arrived (CONTRACT §9; docs/decisions,
// "A real tokenizer for calls without usage"): `o200k_base` from gpt-tokenizer, pure JavaScript, offline.
// Off the hot path: a call whose provider reports usage never comes here. Its tables take a fraction of
// a second to load, so they are loaded on first use. Counting costs about 0.1–0.9 ms per KB (base64 the
// dearest), so a long text is counted in slices of about 8 KB, cut before a space where there is one,
// with the event loop let go between slices: a 400 KB prompt never holds every other call for a third of
// a second. A cut can only split a token a BPE pass would have joined, so the sum is never below the
// whole text's count by more than the few cuts.

type Encoding = typeof import('gpt-tokenizer/encoding/o200k_base');

let loading: Promise<Encoding> | undefined;

/** The encoding, loaded once (the first call waits for it). */
export const tokenizerReady = (): Promise<Encoding> =>
  (loading ??= import('gpt-tokenizer/encoding/o200k_base'));

const SLICE = 8 * 1024;

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** The number of `o200k_base` tokens of `text`. */
export async function countTokens(text: string): Promise<number> {
  if (!text) return 0;
  const { countTokens: count } = await tokenizerReady();
  let n = 0;
  for (let from = 0; from < text.length;) {
    let to = Math.min(text.length, from + SLICE);
    if (to < text.length) {
      const space = text.lastIndexOf(' ', to);
      if (space > from + SLICE / 2) to = space;
      // Never between the two halves of a surrogate pair.
      else if (/[\uD800-\uDBFF]/.test(text[to - 1]!)) to--;
    }
    n += count(text.slice(from, to));
    from = to;
    if (from < text.length) await nextTurn();
  }
  return n;
}
