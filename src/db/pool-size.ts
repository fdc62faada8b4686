import pg from 'pg';

// How many connections each process's pool may open (docs/deploying.md, "Every core"). Every process — the
// one process, or each of WEB_CONCURRENCY workers — has its own pool and two connections beside it, so a
// host's demand is processes × (pool + 2). PostgreSQL refuses connections past its max_connections; a
// pool that asks for one more under load gets an error on the request that needed it. So the size is
// settled at start, against what the server allows: the default pool shrinks to fit, down to a floor,
// and a start that cannot fit even that refuses, naming the variables to change.

/** Each process's pool when nothing needs it smaller. */
export const DEFAULT_POOL_SIZE = 20;
/** Connections a process opens beside its pool: the read lane (src/db/lane.ts) and the deletions' listener (src/billing/live-calls.ts). */
export const CONNECTIONS_BESIDE_POOL = 2;
/** The smallest pool the default shrinks to: below this a busy process would queue for connections. */
export const MIN_POOL_SIZE = 4;

export type PoolPlan = { size: number; note?: string } | { refused: string };

/**
 * Each process's pool for `processes` processes on a server that allows `allowed` connections.
 * `requested` (DATABASE_POOL_SIZE) is kept as it is: it may be meant for a connection pooler in front of
 * the server, whose limits are not the server's; a demand over `allowed` is noted, not refused.
 */
export function poolPlan(opts: { processes: number; allowed: number; requested?: number }): PoolPlan {
  const { processes, allowed, requested } = opts;
  const demand = (size: number) => processes * (size + CONNECTIONS_BESIDE_POOL);
  if (requested !== undefined) {
    return demand(requested) <= allowed
      ? { size: requested }
      : {
          size: requested,
          note: `${processes} processes × (DATABASE_POOL_SIZE ${requested} + ${CONNECTIONS_BESIDE_POOL}) = ${demand(requested)} connections, more than the ${allowed} PostgreSQL allows (max_connections less its reserved ones); fine behind a connection pooler, else lower DATABASE_POOL_SIZE or WEB_CONCURRENCY`,
        };
  }
  if (demand(DEFAULT_POOL_SIZE) <= allowed) return { size: DEFAULT_POOL_SIZE };
  const fits = Math.floor(allowed / processes) - CONNECTIONS_BESIDE_POOL;
  if (fits >= MIN_POOL_SIZE)
    return {
      size: fits,
      note: `each process's pool is ${fits} connections (not ${DEFAULT_POOL_SIZE}): ${processes} processes × (${fits} + ${CONNECTIONS_BESIDE_POOL}) fit the ${allowed} PostgreSQL allows`,
    };
  return {
    refused:
      `WEB_CONCURRENCY: ${processes} processes need at least ${demand(MIN_POOL_SIZE)} PostgreSQL connections ` +
      `(${MIN_POOL_SIZE} in each pool + ${CONNECTIONS_BESIDE_POOL} beside it), and the server allows ${allowed} ` +
      `(max_connections less its reserved ones); lower WEB_CONCURRENCY, raise max_connections, or set ` +
      'DATABASE_POOL_SIZE (behind a connection pooler)',
  };
}

/** The connections the server gives ordinary roles: max_connections less the reserved ones (PostgreSQL 16's too). */
export async function allowedConnections(databaseUrl: string): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 5_000 });
  client.on('error', () => {});
  await client.connect();
  try {
    const { rows } = await client.query<{ allowed: number }>(
      `select current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
              - coalesce(current_setting('reserved_connections', true)::int, 0) as allowed`,
    );
    return rows[0]!.allowed;
  } finally {
    await client.end().catch(() => {});
  }
}
