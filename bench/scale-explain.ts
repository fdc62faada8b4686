// `node --import tsx bench/scale-explain.ts <database> [--full] [--new-rows N] [--routes]`: on a kept
// scale database (bench/scale.ts, BENCH_SCALE_DATABASE), every statement's plan and time, captured by
// auto_explain as svc runs it (EXPLAIN ANALYZE, BUFFERS; per-node timing off, so statements run at
// nearly their own speed). Reconciliation by default: `--new-rows N` first writes N settled calls
// (bench/scale-seed.ts seedNewCalls), `--full` runs the full check; statements slower than `--min-ms`
// (default 20) are printed with their scans, sorts and buffers. `--routes`: svc serves the database and
// each route the scale bench measures is requested once (after a warm-up), with every statement it ran.
// auto_explain is switched on for the database while this runs (ALTER DATABASE … SET, reset after), so
// that every connection has it, the read lane's too. The admin URL is the bench's.
import { sql } from 'drizzle-orm';
import pg from 'pg';
import { adoptMigrations } from './scale-keep.js';
import { openDatabase, queryRows } from '../src/db/client.js';
import { reconcile } from '../src/billing/reconcile.js';
import { createLogger } from '../src/log.js';
import { seedNewCalls } from './scale-seed.js';
import { processCpuUs } from './proc-cpu.js';

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  'Sort Method'?: string;
  Plans?: PlanNode[];
}

const ADMIN =
  process.env.BENCH_DATABASE_URL ||
  process.env.TEST_DATABASE_URL ||
  process.env.DATABASE_URL ||
  'postgres://postgres@127.0.0.1:5432/test';

function arg(name: string): string | undefined {
  const at = process.argv.indexOf(name);
  return at < 0 ? undefined : process.argv[at + 1];
}

const nodes = (p: PlanNode): PlanNode[] => [p, ...(p.Plans ?? []).flatMap(nodes)];

/** One line per scan, sort and aggregate of a plan: what it read and how. */
export function describePlan(plan: PlanNode): string[] {
  return nodes(plan)
    .filter((n) => n['Relation Name'] || /Sort|Aggregate|Hash Join|Nested Loop/.test(n['Node Type']))
    .map((n) => {
      const rows = (n['Actual Rows'] ?? 0) * (n['Actual Loops'] ?? 1);
      const on = n['Relation Name'] ? ` on ${n['Relation Name']}` : '';
      const using = n['Index Name'] ? ` using ${n['Index Name']}` : '';
      const removed = n['Rows Removed by Filter'] ? `, ${n['Rows Removed by Filter']} filtered away` : '';
      const sort = n['Sort Method'] ? ` (${n['Sort Method']})` : '';
      const buffers = n['Relation Name']
        ? `, buffers hit ${n['Shared Hit Blocks'] ?? 0} read ${n['Shared Read Blocks'] ?? 0}`
        : '';
      return `${n['Node Type']}${on}${using}${sort}: ${rows} rows${removed}${buffers}`;
    });
}

async function main() {
  const name = process.argv[2];
  if (!name || !/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error('usage: scale-explain.ts <database> [...]');
  const url = new URL(ADMIN);
  url.pathname = `/${name}`;
  const minMs = Number(arg('--min-ms') ?? 20);
  const newRows = Number(arg('--new-rows') ?? 0);
  if (newRows > 0) {
    const c = new pg.Client({ connectionString: url.toString() });
    await c.connect();
    try {
      const users = Number(
        (await c.query<{ n: number }>("select (counts->>'users')::int as n from bench_scale_seed")).rows[0]!
          .n,
      );
      const t = Date.now();
      await seedNewCalls(c, { users, count: newRows, tag: Date.now().toString(36) });
      process.stdout.write(`${newRows} new calls written in ${((Date.now() - t) / 1000).toFixed(1)} s\n`);
    } finally {
      await c.end();
    }
  }
  const settings: [string, string][] = [
    ['session_preload_libraries', 'auto_explain'],
    ['auto_explain.log_min_duration', '0'],
    ['auto_explain.log_level', 'notice'],
    ['auto_explain.log_format', 'json'],
    ['auto_explain.log_analyze', 'on'],
    ['auto_explain.log_buffers', 'on'],
    ['auto_explain.log_timing', 'off'],
  ];
  // `--as-seeded`: the database's schema as it is (to measure before a schema change of this tree).
  if (!process.argv.includes('--as-seeded')) await adoptMigrations(url.toString());
  const admin = new pg.Client({ connectionString: ADMIN });
  await admin.connect();
  // Every connection svc opens sends its statements' plans back as notices: collected here.
  const seen: Statement[] = [];
  type Connect = (this: pg.Client, ...args: unknown[]) => unknown;
  const proto = pg.Client.prototype as unknown as { connect: Connect };
  const connect = proto.connect;
  proto.connect = function (this: pg.Client, ...args: unknown[]) {
    this.on('notice', (n) => {
      const m = /duration: ([\d.]+) ms\s+plan:\s*([\s\S]*)$/.exec(n.message ?? '');
      if (!m) return;
      const doc = JSON.parse(m[2]!) as { 'Query Text': string; Plan: PlanNode };
      seen.push({ ms: Number(m[1]), query: doc['Query Text'], plan: doc.Plan });
    });
    return connect.apply(this, args);
  };
  try {
    for (const [k, v] of settings) await admin.query(`alter database "${name}" set ${k} = '${v}'`);
    if (process.argv.includes('--routes')) await explainRoutes(url.toString(), seen);
    else await explainReconcile(url.toString(), seen, minMs);
  } finally {
    for (const [k] of settings) await admin.query(`alter database "${name}" reset ${k}`);
    await admin.end();
  }
}

const BACKGROUND =
  /^(insert into svc_processes|select id, org_key, purpose, threshold|with due as|update auto_topup_charges|with claimed as)/;

interface Statement {
  ms: number;
  query: string;
  plan: PlanNode;
}

function print(list: Statement[], minMs: number) {
  for (const s of list.filter((x) => x.ms >= minMs)) {
    process.stdout.write(`  ${s.ms.toFixed(2)} ms  ${s.query.replace(/\s+/g, ' ').trim().slice(0, 150)}\n`);
    for (const line of describePlan(s.plan)) process.stdout.write(`      ${line}\n`);
  }
}

async function explainReconcile(databaseUrl: string, seen: Statement[], minMs: number) {
  const database = await openDatabase({ databaseUrl, poolSize: 1, queryTimeoutMs: 0 });
  try {
    // One connection runs the whole run: its backend's CPU time says what the run cost PostgreSQL,
    // which a loaded machine's wall-clock time does not (the server is local: /proc is its).
    const [row] = await queryRows<{ pid: number }>(database.db, sql`select pg_backend_pid() as pid`);
    const pid = row!.pid;
    const cpu = () => processCpuUs(pid) / 1000;
    const cpuBefore = cpu();
    const t = Date.now();
    const report = await reconcile(database.db, createLogger('silent'), null, {
      full: process.argv.includes('--full'),
      settleWindowSeconds: 0,
    });
    const ms = Date.now() - t;
    const cpuMs = cpu() - cpuBefore;
    const { from, to } = report.checkpoint;
    process.stdout.write(
      `reconcile ${report.mode}: ${ms} ms (PostgreSQL backend CPU ${cpuMs.toFixed(0)} ms), ledger ids ${from} → ${to}, ${report.violations.length} violations, ` +
        `${report.prunedHolds} holds pruned; ${seen.length} statements, ${seen.reduce((s, x) => s + x.ms, 0).toFixed(0)} ms in them\n`,
    );
    if (report.violations.length)
      process.stdout.write(`${JSON.stringify(report.violations).slice(0, 2000)}\n`);
    print(
      [...seen].sort((a, b) => b.ms - a.ms),
      minMs,
    );
  } finally {
    await database.close();
  }
}

async function explainRoutes(databaseUrl: string, seen: Statement[]) {
  process.env.TEST_DATABASE_URL = ADMIN;
  const { startTestServer } = await import('../test/helpers/server.js');
  const { createApiToken } = await import('../test/helpers/fixtures.js');
  const { issueSession } = await import('../src/auth/session.js');
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  const { measured, counts } = (
    await c.query<{
      measured: { userId: string; orgKey: string; clientId: string };
      counts: { users: number };
    }>('select measured, counts from bench_scale_seed')
  ).rows[0]!;
  await c.end();
  const server = await startTestServer({
    databaseUrl,
    env: { MODEL_PRICE_INPUT: '100000', MODEL_PRICE_OUTPUT: '100000', RATE_LIMIT_IP_PER_MIN: '1000000' },
  });
  try {
    const { token: session } = await issueSession(server.deps.db, server.deps.keys.session, measured.userId);
    const { secret } = await createApiToken(server, measured, measured.orgKey, 'explain');
    const get = async (path: string, bearer = session, body?: unknown) => {
      const res = await fetch(`${server.url}${path}`, {
        method: body ? 'POST' : 'GET',
        headers: {
          authorization: `Bearer ${bearer}`,
          ...(body ? { 'content-type': 'application/json' } : {}),
        },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`${path} answered ${res.status}: ${text.slice(0, 300)}`);
      return JSON.parse(text) as { data?: Record<string, unknown>[] } | Record<string, unknown>[];
    };
    const idAt = async (list: string, offset: number) => {
      const body = await get(`${list}${list.includes('?') ? '&' : '?'}limit=1&offset=${offset}`);
      return String((Array.isArray(body) ? body : body.data!)[0]!.id);
    };
    const client = measured.clientId;
    const deep = Math.min(100_000, counts.users);
    const projectsDeep = Math.floor(counts.users / 40);
    const tx = `/v1/clients/${client}/credits/transactions`;
    const calls = `/v1/clients/${client}/usage/calls`;
    const projects = `/v1/projects?org_id=${client}`;
    const routes: [string, string, string?, unknown?][] = [
      ['transactions, first page', tx],
      [`transactions, starting_after ${deep} deep`, `${tx}?starting_after=${await idAt(tx, deep)}`],
      [`transactions, offset ${Math.floor(deep / 10)}`, `${tx}?offset=${Math.floor(deep / 10)}`],
      ['projects, first page', projects],
      [
        `projects, starting_after ${projectsDeep} deep`,
        `${projects}&starting_after=${await idAt(projects, projectsDeep)}`,
      ],
      [`projects, offset ${projectsDeep}`, `${projects}&offset=${projectsDeep}`],
      ['usage calls, first page', calls],
      [`usage calls, starting_after ${deep} deep`, `${calls}?starting_after=${await idAt(calls, deep)}`],
      ['usage totals by day, 30 days', `/v1/clients/${client}/usage`],
      ['usage totals by member, 30 days', `/v1/clients/${client}/usage?group_by=member`],
      ['GET /v1/auth/verify', '/v1/auth/verify', secret],
      ['GET /v1/owner/balance', '/v1/owner/balance'],
      ['credits/balance', `/v1/clients/${client}/credits/balance`],
      ['GET /v1/clients', '/v1/clients'],
      [
        'POST /v1/chat/completions',
        '/v1/chat/completions',
        secret,
        { model: 'x', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 },
      ],
    ];
    for (const [label, path, bearer, body] of routes) {
      await get(path, bearer, body); // warm: plans cached, pages in memory
      seen.length = 0;
      const t = performance.now();
      await get(path, bearer, body);
      const ms = performance.now() - t;
      // Let the notices of the request's last statements arrive.
      await new Promise((r) => setTimeout(r, 50));
      // What svc's own timers ran meanwhile (liveness beat, crossings, deliveries, auto top-up) is not the route's.
      const mine = seen.filter((s) => !BACKGROUND.test(s.query.trim()));
      seen.length = 0;
      seen.push(...mine);
      const flags = seen.flatMap((s) =>
        nodes(s.plan)
          .filter((n) => n['Node Type'] === 'Seq Scan' || /Sort/.test(n['Node Type']))
          .map((n) => `${n['Node Type']}${n['Relation Name'] ? ` on ${n['Relation Name']}` : ''}`),
      );
      process.stdout.write(
        `\n${label}: ${ms.toFixed(1)} ms over HTTP, ${seen.length} statements, ` +
          `${seen.reduce((s, x) => s + x.ms, 0).toFixed(2)} ms in PostgreSQL` +
          `${flags.length ? `; ${flags.join(', ')}` : '; no seq scan, no sort'}\n`,
      );
      print(seen, 0);
    }
  } finally {
    await server.close();
  }
}

await main();
