import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { processCpuUs } from './proc-cpu.js';

// What a request costs the server that answers it, in figures a loaded machine does not move much: CPU
// time of the server process (process.cpuUsage) and of its PostgreSQL backends (/proc), and the
// statements it sent (each one a round trip). Throughput on a shared 2-core machine swings with the
// scheduler; CPU per request and round trips per request do not. Used by the mcp and
// oauth benches: a server child serves its counters on a loopback port of its own (serveCost), the
// parent reads them before and after a phase (readCost) and divides by the requests of that phase.

export interface Cost {
  /** User + system CPU of the process, µs. */
  cpuUs: number;
  /** Statements sent to PostgreSQL through node-postgres (PostgreSQL mode; 0 on PGlite). */
  statements: number;
  /** User + system CPU of the PostgreSQL backends serving the database, µs (PostgreSQL mode). */
  postgresUs: number;
}

let statements = 0;
let counting = false;
/** The probe's own connections, whose statements are not the server's. */
const probeClients = new WeakSet<pg.Client>();

/** Counts every statement node-postgres sends from now on (pool, transactions, the read lane). */
export function countStatements(): void {
  if (counting) return;
  counting = true;
  const proto = pg.Client.prototype as unknown as {
    query: (this: pg.Client, ...args: unknown[]) => unknown;
  };
  const query = proto.query;
  proto.query = function (this: pg.Client, ...args: unknown[]) {
    if (!probeClients.has(this)) statements++;
    return query.apply(this, args);
  };
}

/** The CPU of the backends connected to `databaseUrl`'s database (on this machine), µs. */
async function postgresCpuUs(databaseUrl: string): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrl });
  probeClients.add(client);
  client.on('error', () => {});
  await client.connect();
  try {
    const { rows } = await client.query<{ pid: number }>(
      'select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()',
    );
    return rows.reduce((sum, r) => sum + processCpuUs(r.pid), 0);
  } finally {
    await client.end();
  }
}

/** Serves this process's Cost as JSON on a loopback port; resolves with its URL. */
export async function serveCost(databaseUrl: string | undefined): Promise<string> {
  const server = createServer((_req, res) => {
    const { user, system } = process.cpuUsage();
    const statementsNow = statements;
    const backends = databaseUrl ? postgresCpuUs(databaseUrl) : Promise.resolve(0);
    void backends.then(
      (postgresUs) => {
        const cost: Cost = { cpuUs: user + system, statements: statementsNow, postgresUs };
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify(cost));
      },
      (err: unknown) => res.writeHead(500).end(String(err)),
    );
  });
  server.unref();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
}

export async function readCost(url: string): Promise<Cost> {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`cost probe answered ${res.status}`);
  return (await res.json()) as Cost;
}

/** The cost of one request between two readings over `requests` requests. */
export function perRequest(before: Cost, after: Cost, requests: number) {
  const n = Math.max(requests, 1);
  return {
    cpuUs: (after.cpuUs - before.cpuUs) / n,
    postgresUs: (after.postgresUs - before.postgresUs) / n,
    statements: (after.statements - before.statements) / n,
  };
}

export const costLine = (name: string, c: ReturnType<typeof perRequest>, storage: string) =>
  `${name.padEnd(26)} CPU ${c.cpuUs.toFixed(0).padStart(6)} µs/request` +
  (storage === 'postgres'
    ? `   PostgreSQL backends ${c.postgresUs.toFixed(0).padStart(5)} µs/request   statements ${c.statements.toFixed(2)}/request`
    : '');
