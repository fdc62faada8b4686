// PostgreSQL's deadlock detector (SQLSTATE 40P01) rolls the victim's transaction back whole, so running
// that whole transaction once more is safe; where two billing paths can meet in opposite lock orders
// (docs/contributing/billing-internals.md "Lock order"), the caller wraps its transaction in this.

/** node-postgres and PGlite put the SQLSTATE in `code`; drizzle wraps driver errors in `cause`. */
export function pgCode(err: unknown): string | undefined {
  const e = err as { code?: string; cause?: { code?: string } } | null;
  return e?.code ?? e?.cause?.code;
}

/** Runs `run` (one whole transaction), and once more if PostgreSQL chose it as a deadlock's victim. */
export async function retryOnDeadlock<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (pgCode(err) !== '40P01') throw err;
    return run();
  }
}
