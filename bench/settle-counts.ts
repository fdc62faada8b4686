// `node --import tsx bench/settle-counts.ts`: what PostgreSQL does for one chat call's billing, counted
// rather than timed. A throw-away database migrated from this tree, one organization funded, then
// BENCH_CALLS calls (default 1,000), each the model path's two statements of one call: a hold
// (svc_reserve_holds) and its settle with a usage record (svc_settle_holds), on one connection, BENCH_BATCH
// calls in each statement. Prints, per call: the backend's CPU (/proc), each function's time
// (track_functions = all), and for one more batch under EXPLAIN (ANALYZE, WAL, BUFFERS) the WAL records and
// bytes and the buffers each statement touched. The counts are exact and do not move with the machine's load; the CPU figures do. Run it in
// two trees to compare them (the decision records' PostgreSQL-alone figures come from it).
//
// Environment: BENCH_DATABASE_URL (an admin URL; default postgres://postgres@127.0.0.1:5432/test),
// BENCH_CALLS, BENCH_BATCH (calls per statement, default 1: the model path's batch at a low pace; at its
// most a settle carries about ten), BENCH_ORGS (organizations the calls go round, each its own account
// and usage sink, default 1: a batch over many touches as many accounts), BENCH_NEXT=1 (each settle also
// takes its org's next hold, as the model path's settles do: src/models/admission/spare-holds.ts).
import pg from 'pg';
import { sql } from 'drizzle-orm';
import { processCpuUs } from './proc-cpu.js';
import { knob } from './knobs.js';
import { fundedDatabase } from './funded-database.js';

const ADMIN = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const BATCH = knob('BENCH_BATCH', 1, 1);
const CALLS = Math.ceil(knob('BENCH_CALLS', 1000, 50) / BATCH) * BATCH;
const ORGS = Array.from({ length: knob('BENCH_ORGS', 1, 1) || 1 }, (_, n) => `countorg${n}`);
const NEXT = process.env.BENCH_NEXT === '1';
/** The org of the batch's k-th call: round the orgs, so a batch of n touches min(n, orgs) accounts. */
const orgOf = (k: number) => ORGS[k % ORGS.length]!;

const RESERVE = `select * from svc_reserve_holds($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::float8[])`;
const SETTLE = `select * from svc_settle_holds($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[],
  $6::bigint[], $7::bigint[], $8::float8, $9::jsonb)`;

const usage = {
  user: 'usr_count',
  api_token_id: 1,
  source: 'chat',
  model: 'x',
  prompt_tokens: 12,
  completion_tokens: 30,
  cached_prompt_tokens: 0,
  price_input: '1',
  price_output: '2',
  duration_ms: 3,
  outcome: 'completed',
};

const each = <T>(ids: string[], v: T) => ids.map(() => v);
const reserveArgs = (ids: string[]) => [
  ids,
  ids.map((_, k) => orgOf(k)),
  each(ids, 'usr_count'),
  each(ids, 60),
  each(ids, 60),
  each(ids, 900),
];
const settleArgs = (ids: string[]) => [
  ids,
  each(ids, 42),
  each(ids, 'chat x'),
  NEXT ? ids.map((id) => `${id}_next`) : each(ids, null),
  NEXT ? ids.map((_, k) => orgOf(k)) : each(ids, null),
  each(ids, NEXT ? 60 : null),
  each(ids, NEXT ? 600 : null),
  900,
  JSON.stringify(ids.map((_, k) => ({ ...usage, org: orgOf(k) }))),
];
const batchOf = (prefix: string, n: number) => Array.from({ length: BATCH }, (_, k) => `${prefix}_${n}_${k}`);

/** Values of a statement as literals, for EXPLAIN (which takes no parameters). */
const literal = (client: pg.Client, v: unknown): string =>
  v === null
    ? 'null'
    : Array.isArray(v)
      ? `array[${v.map((x) => literal(client, x)).join(',')}]`
      : typeof v === 'number'
        ? String(v)
        : client.escapeLiteral(v as string);

function bound(text: string, values: unknown[], client: pg.Client): string {
  return text.replace(/\$(\d+)/g, (_, n: string) => {
    const v = values[Number(n) - 1];
    // An array of nulls needs its element type from the cast that follows.
    return Array.isArray(v) && v.every((x) => x === null)
      ? `array[${v.map(() => 'null').join(',')}]`
      : literal(client, v);
  });
}

interface PlanNode {
  'Shared Hit Blocks': number;
  'Shared Read Blocks': number;
  'Shared Dirtied Blocks': number;
  'WAL Records': number;
  'WAL Bytes': number;
}

async function explain(client: pg.Client, text: string, values: unknown[]): Promise<PlanNode> {
  const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
    `explain (analyze, wal, buffers, format json) ${bound(text, values, client)}`,
  );
  return rows[0]!['QUERY PLAN'][0].Plan;
}

interface FunctionRow {
  funcname: string;
  calls: string;
  total_time: number;
  self_time: number;
}
const FUNCTIONS =
  'select funcname, calls, total_time, self_time from pg_stat_user_functions order by total_time desc';

const funded = await fundedDatabase({
  adminUrl: ADMIN,
  prefix: 'svc_counts',
  poolSize: 2,
  userId: 'usr_count',
  orgs: ORGS,
});
const { url } = funded;
const client = new pg.Client({ connectionString: url });
const reader = new pg.Client({ connectionString: url });
try {
  const db = funded.database.db;
  if (process.env.BENCH_COUNTS_SQL) await db.execute(sql.raw(process.env.BENCH_COUNTS_SQL));
  await client.connect();
  await reader.connect();
  await client.query(`set track_functions = 'all'`);
  const { rows: backend } = await client.query<{ pid: number }>('select pg_backend_pid() as pid');
  const pid = backend[0]!.pid;
  const batch = async (ids: string[]) => {
    await client.query({ name: 'reserve', text: RESERVE, values: reserveArgs(ids) });
    await client.query({ name: 'settle', text: SETTLE, values: settleArgs(ids) });
  };
  for (let i = 0; i < 50; i++) await batch(batchOf('req_warm', i));
  // The warm-up's function statistics reach the shared view when the backend next reports while idle
  // (at most once a second): wait for that, and subtract them.
  await client.query('select pg_sleep(1.1)');
  await client.query('select 1');
  const { rows: warm } = await reader.query<FunctionRow>(FUNCTIONS);
  const cpuBefore = processCpuUs(pid);
  const started = process.hrtime.bigint();
  for (let i = 0; i < CALLS / BATCH; i++) await batch(batchOf('req_count', i));
  const wallUs = Number(process.hrtime.bigint() - started) / 1000;
  const cpuUs = processCpuUs(pid) - cpuBefore;
  // One more batch under EXPLAIN on the same (warm) connection: its plans are cached as the calls' were.
  const reserve = await explain(client, RESERVE, reserveArgs(batchOf('req_explained', 0)));
  const settle = await explain(client, SETTLE, settleArgs(batchOf('req_explained', 0)));
  // The statistics of this backend reach the view when it ends.
  await client.end();
  await new Promise((resolve) => setTimeout(resolve, 200));
  const { rows: fns } = await reader.query<FunctionRow>(FUNCTIONS);
  const out = (s: string) => process.stdout.write(`${s}\n`);
  out(
    `settle counts: ${CALLS} calls (reserve + settle with usage record${NEXT ? ' and next hold' : ''}), ${BATCH} a statement over ${ORGS.length} org(s), one connection, ${new URL(url).host}`,
  );
  out(
    `  backend CPU per call ${((cpuUs / CALLS) | 0).toLocaleString('en')} µs (10 ms ticks), wall per call ${((wallUs / CALLS) | 0).toLocaleString('en')} µs`,
  );
  for (const f of fns) {
    const w = warm.find((x) => x.funcname === f.funcname);
    if (w)
      Object.assign(f, {
        calls: String(Number(f.calls) - Number(w.calls)),
        total_time: f.total_time - w.total_time,
        self_time: f.self_time - w.self_time,
      });
    out(
      `  ${f.funcname.padEnd(28)} calls/call ${(Number(f.calls) / CALLS).toFixed(2)}  total ${((f.total_time * 1000) / CALLS).toFixed(0).padStart(5)} µs  self ${((f.self_time * 1000) / CALLS).toFixed(0).padStart(5)} µs per call`,
    );
  }
  for (const [label, p] of [
    ['reserve', reserve],
    ['settle', settle],
  ] as const)
    out(
      `  ${label.padEnd(8)} (a statement of ${BATCH}) WAL records ${p['WAL Records']}, WAL bytes ${p['WAL Bytes']}, buffers hit ${p['Shared Hit Blocks']} read ${p['Shared Read Blocks']} dirtied ${p['Shared Dirtied Blocks']}`,
    );
} finally {
  await client.end().catch(() => {});
  await reader.end().catch(() => {});
  await funded.drop();
}
