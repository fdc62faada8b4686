// The benches' knobs, read from the environment, and their smoke mode. `npm run bench -- <name> --smoke`
// (BENCH_SMOKE=1; .ci/run uses it) runs a bench end to end in a second or two per phase: every phase, its
// ratio line and its exactness checks, with short phases and no warm-up. A smoke run's figures mean
// nothing; it proves that the bench still runs, so that benches nothing else exercises cannot rot.

export const smoke = process.env.BENCH_SMOKE === '1';

/** A numeric knob: the variable when set, else the smoke value in smoke mode, else the default. */
export function knob(name: string, normal: number, inSmoke: number): number {
  const raw = process.env[name];
  if (raw !== undefined && raw !== '') {
    const value = Number(raw);
    if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a non-negative number`);
    return value;
  }
  return smoke ? inSmoke : normal;
}

/**
 * The database URL a bench's svc child was given (TEST_DATABASE_URL, else DATABASE_URL), or undefined
 * for the embedded PGlite. Never `process.env.X ??= process.env.Y`: assigning undefined to process.env
 * stores the string "undefined", which pg reads as a connection string to host "base".
 */
export function namedDatabaseUrl(): string | undefined {
  return process.env.TEST_DATABASE_URL || process.env.DATABASE_URL || undefined;
}

/** This machine's PostgreSQL, the benches' default when it answers. */
export const LOCAL_POSTGRES = 'postgres://postgres@127.0.0.1:5432/test';

/**
 * The PostgreSQL a bench's svc runs on, as deployed: the named one, else this machine's when it answers;
 * undefined (the embedded PGlite) when none answers or BENCH_STORAGE=pglite asks for it.
 */
export async function benchDatabaseUrl(): Promise<string | undefined> {
  if (process.env.BENCH_STORAGE === 'pglite') return undefined;
  const named = namedDatabaseUrl();
  if (named) return named;
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: LOCAL_POSTGRES, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('select 1');
    return LOCAL_POSTGRES;
  } catch {
    return undefined;
  } finally {
    await client.end().catch(() => {});
  }
}
