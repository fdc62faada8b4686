// `npm run bench -- billing`: reserve→settle cycles per second through svc's spend primitives, on one
// hot client and spread over 100 clients, with exact final balances checked, beside pgbench running
// the same SQL functions on the same database in the same run, as a ratio. svc goes through the model
// path's group commit (ModelServices.spend: one statement for every call in flight); pgbench calls the
// functions once per call, so the ratio shows what the grouping buys as well as what the driver costs.
//
// Environment: BENCH_DATABASE_URL (an admin URL; default postgres://postgres@127.0.0.1:5432/test; a
// throw-away database is created and dropped), BENCH_SECONDS (default 5), BENCH_CONCURRENCY (default 8).
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { sql } from 'drizzle-orm';
import { openDatabase, queryRows, type Db } from '../src/db/client.js';
import { runMigrations } from '../src/db/migrate.js';
import { grantToOrg, SOURCE_PURCHASES } from '../src/billing/ledger.js';
import { createSpendBatchers } from '../src/models/services.js';
import { checkInvariants } from '../src/billing/invariants.js';
import { randomToken } from '../src/ids.js';
import { knob } from './knobs.js';
import { transaction } from '../src/db/transaction.js';

const ADMIN = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const SECONDS = knob('BENCH_SECONDS', 5, 1);
const CONCURRENCY = knob('BENCH_CONCURRENCY', 8, 4);
const HOLD = 10;
const DEBIT = 7;
const FUND = 1_000_000_000;
const SPREAD = 100;

const orgKeyOf = (i: number) => `bench${String(i).padStart(3, '0')}`;
const HOT = 'benchhot';

async function withAdmin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: ADMIN });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

async function setup(db: Db) {
  await db.execute(
    sql`insert into users (id, email, name, password_hash) values ('usr_bench', 'bench@example.test', 'bench', 'x')`,
  );
  for (const key of [HOT, ...Array.from({ length: SPREAD }, (_, i) => orgKeyOf(i))]) {
    await db.execute(sql`insert into orgs (id, name, owner_id) values (${key}, ${key}, 'usr_bench')`);
    await transaction(db, (tx) =>
      grantToOrg(tx, {
        key: `bench:${key}`,
        source: SOURCE_PURCHASES,
        ownerId: 'usr_bench',
        orgKey: key,
        amount: FUND,
        type: 'topup',
        description: 'bench',
      }),
    );
  }
}

/** svc: CONCURRENCY workers each looping reserve→settle for SECONDS; returns cycles per org. */
async function runSvc(
  db: Db,
  pick: () => string,
): Promise<{ perSecond: number; counts: Map<string, number> }> {
  const spend = createSpendBatchers(db);
  const counts = new Map<string, number>();
  const deadline = Date.now() + SECONDS * 1000;
  let n = 0;
  const started = Date.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, w) => {
      while (Date.now() < deadline) {
        const orgKey = pick();
        const requestId = `svc_${w}_${n++}_${randomToken(4)}`;
        await spend.reserve({ orgKey, userId: 'usr_bench', requestId, minCredits: HOLD, maxCredits: HOLD });
        await spend.settle({ requestId, actualCredits: DEBIT, description: 'bench' });
        counts.set(orgKey, (counts.get(orgKey) ?? 0) + 1);
      }
    }),
  );
  const total = [...counts.values()].reduce((a, b) => a + b, 0);
  return { perSecond: total / ((Date.now() - started) / 1000), counts };
}

/** The same functions as the model path's reserve and settle, one call each per cycle, as a pgbench script. */
function pgbenchScript(pickOrg: string): string {
  const req = `'pgb_' || (:client_id)::text || '_' || (:r)::text`;
  return `\\set r random(1, 1000000000000)
${pickOrg}
select * from svc_reserve_holds(array[${req}], array[:'org'], array['usr_bench'], array[${HOLD}]::bigint[], array[${HOLD}]::bigint[], array[900]::float8[]);
select * from svc_settle_holds(array[${req}], array[${DEBIT}]::bigint[], array['pgbench']);
`;
}

function runPgbench(url: string, script: string): number {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-'));
  try {
    const file = join(dir, 'spend.sql');
    writeFileSync(file, script);
    const u = new URL(url);
    const res = spawnSync(
      'pgbench',
      [
        '-n',
        '-M',
        'prepared',
        '-c',
        String(CONCURRENCY),
        '-j',
        '2',
        '-T',
        String(SECONDS),
        '-f',
        file,
        '-h',
        u.hostname,
        '-p',
        u.port || '5432',
        '-U',
        decodeURIComponent(u.username || 'postgres'),
        u.pathname.slice(1),
      ],
      { encoding: 'utf8' },
    );
    const tps = /tps = ([\d.]+)/.exec(res.stdout ?? '');
    if (res.status !== 0 || !tps) throw new Error(`pgbench failed: ${res.stderr || res.stdout}`);
    return Number(tps[1]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function balances(db: Db): Promise<Map<string, number>> {
  const rows = await queryRows<{ org_key: string; balance: unknown }>(
    db,
    sql`select org_key, balance from billing_accounts where kind = 'org'`,
  );
  return new Map(rows.map((r) => [r.org_key, Number(r.balance)]));
}

try {
  execFileSync('pgbench', ['--version'], { stdio: 'ignore' });
} catch {
  process.stderr.write(
    'bench billing: pgbench not found (Debian: apt-get install postgresql-client or postgresql-contrib)\n',
  );
  process.exit(2);
}

const name = `svc_bench_${randomToken(6)}`;
await withAdmin((c) => c.query(`create database "${name}"`));
const url = new URL(ADMIN);
url.pathname = `/${name}`;
const database = await openDatabase({ databaseUrl: url.toString(), poolSize: CONCURRENCY + 2 });
try {
  await runMigrations(database);
  const db = database.db;
  await setup(db);
  const out = (s: string) => process.stdout.write(`${s}\n`);
  out(
    `bench billing: reserve→settle cycles/s, ${CONCURRENCY} concurrent, ${SECONDS}s each, PostgreSQL ${url.host}`,
  );

  const scenarios: [string, () => string, number | null][] = [
    ['one hot client', () => HOT, null],
    [`spread over ${SPREAD} clients`, () => orgKeyOf(Math.floor(Math.random() * SPREAD)), SPREAD],
  ];
  for (const [label, pick, spread] of scenarios) {
    const before = await balances(db);
    const svc = await runSvc(db, pick);
    const after = await balances(db);
    // Exact final balances: every client lost exactly DEBIT per cycle svc counted for it.
    for (const [key, count] of svc.counts) {
      const want = before.get(key)! - count * DEBIT;
      if (after.get(key) !== want)
        throw new Error(`balance of ${key} is ${after.get(key)}, expected ${want}`);
    }
    const cycles = [...svc.counts.values()].reduce((a, b) => a + b, 0);
    const tps = runPgbench(url.toString(), pgbenchFor(spread));
    out(
      `  ${label.padEnd(26)} svc ${svc.perSecond.toFixed(0).padStart(6)}/s   pgbench ${tps.toFixed(0).padStart(6)}/s   ratio ${(svc.perSecond / tps).toFixed(2)}   balances exact (${cycles} cycles)`,
    );
  }
  const violations = await checkInvariants(db);
  out(
    violations.length === 0
      ? '  ledger invariants hold after both runs (svc and pgbench rows)'
      : `  VIOLATIONS: ${JSON.stringify(violations)}`,
  );
  if (violations.length) process.exitCode = 1;
} finally {
  await database.close();
  await withAdmin((c) => c.query(`drop database if exists "${name}" with (force)`));
}

/** The pgbench script for the hot client (spread = null) or a random client among `spread`. */
function pgbenchFor(spread: number | null): string {
  const pickOrg = spread === null ? '' : `\\set n random(0, ${spread - 1})`;
  const orgSql = spread === null ? `'${HOT}'` : `'bench' || lpad((:n)::text, 3, '0')`;
  return pgbenchScript(pickOrg).replaceAll(":'org'", `(${orgSql})`);
}
