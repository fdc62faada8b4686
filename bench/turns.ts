// Two sides of a ratio measured in turns: one stretch each per round, the first alternating (a, b; b, a;
// …), so that a drift of the machine during the run falls on both sides alike. One stretch per side, one
// after the other, moved the same code's ratio by half between quiet runs minutes apart (docs/oauth.md,
// docs/platform.md, docs/scale.md).

/** Runs `measure` for each side `rounds` times in turns; each side's stretches in round order. */
export async function inTurns<S extends string, F>(
  rounds: number,
  sides: readonly [S, S],
  measure: (side: S, round: number) => Promise<F>,
): Promise<Record<S, F[]>> {
  const [a, b] = sides;
  const out = { [a]: [], [b]: [] } as unknown as Record<S, F[]>;
  for (let r = 0; r < rounds; r++)
    for (const side of r % 2 === 0 ? [a, b] : [b, a]) out[side].push(await measure(side, r));
  return out;
}
