// `npm run bench -- scale [--ledger-rows N] [--smoke]`: the hot routes on an empty database beside the
// same routes on one seeded to a production's shape (bench/scale-seed.ts: a million users and ten million
// ledger rows at `--ledger-rows 10000000`; default 1,000,000; 5,000 in --smoke), in the same run, as
// ratios (big / empty). Then reconciliation on both: the full check, and the incremental check after
// the routes' own writes (docs/scale.md).
//
// Each svc runs in its own process (this file with BENCH_ROLE=svc) on its own PostgreSQL database
// (BENCH_DATABASE_URL, TEST_DATABASE_URL or DATABASE_URL as the admin URL; default
// postgres://postgres@127.0.0.1:5432/test; both databases are dropped afterwards). The measured person
// registers through svc's own services and signs in with a session and an `svc_` token; the seed then
// adds everyone else's rows around theirs. Each route runs BENCH_ROUNDS times (default 3; --smoke 1) on
// each side, the sides taking turns, for BENCH_SECONDS a round (default 5; --smoke 0.5) at
// BENCH_CONNECTIONS (10); beside req/s the bench prints the CPU per request of each side's svc process
// and of its PostgreSQL backends (from /proc), which say where a slower side's time goes.
// BENCH_SCALE_DATABASE=<name> keeps the big side's database between runs (bench/scale-keep.ts: seeded
// once, reused; the full reconcile runs on it every time and stores a fresh checkpoint); `--seed-only`
// stops after the seed, `--reconcile-only` skips the routes, `--only <words>` runs only the routes whose name has those words
// (`--only 'a|b'`: either), `--new-rows N` writes N settled calls on the big side before the incremental reconcile (its goal:
// under 5 s after 100,000 new rows). BENCH_CPU_PROF=<file> writes the empty side's CPU profile.
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { announce, startChild, stopChild } from './children.js';
import { knob, smoke } from './knobs.js';
import { openDatabase, type Db } from '../src/db/client.js';
import { reconcile } from '../src/billing/reconcile.js';
import { seedNewCalls } from './scale-seed.js';
import { adoptMigrations, keptDatabase, storedSeed, type Measured } from './scale-keep.js';
import { createLogger } from '../src/log.js';
import { backendsCpuUs, backendsSpentUs, processCpuUs } from './proc-cpu.js';
import { inTurns } from './turns.js';
import { startCpuProfile } from './cpu-profile.js';

const role = process.env.BENCH_ROLE;
const here = fileURLToPath(import.meta.url);
const ADMIN =
  process.env.BENCH_DATABASE_URL ||
  process.env.TEST_DATABASE_URL ||
  process.env.DATABASE_URL ||
  'postgres://postgres@127.0.0.1:5432/test';

function flag(name: string, normal: number, inSmoke: number): number {
  const at = process.argv.indexOf(name);
  if (at < 0) return smoke ? inSmoke : normal;
  const value = Number(process.argv[at + 1]);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} takes a whole number`);
  return value;
}

const KEPT = process.env.BENCH_SCALE_DATABASE || undefined;
/** The measured person's own projects and calls on a side seeded afresh: two pages and a few more. */
const OWN_ITEMS = 45;

if (role === 'svc') {
  process.env.TEST_DATABASE_URL = ADMIN;
  const { startTestServer } = await import('../test/helpers/server.js');
  const { createUser, createApiToken } = await import('../test/helpers/fixtures.js');
  const { setOrgBalance } = await import('../test/helpers/billing.js');
  const { issueSession } = await import('../src/auth/session.js');
  const { seedScale } = await import('./scale-seed.js');
  const users = Number(process.env.BENCH_SEED_USERS ?? 0);
  const keptUrl = users > 0 && KEPT ? await keptDatabase(ADMIN, KEPT) : undefined;
  const stored = keptUrl ? await storedSeed(keptUrl) : null;
  const adopted = keptUrl && stored ? await adoptMigrations(keptUrl) : [];
  if (keptUrl && !stored) {
    // A kept database is seeded once, whole: a half-seeded one (a run stopped while seeding) is refused.
    const c = new pg.Client({ connectionString: keptUrl });
    await c.connect();
    const half = await c
      .query("select 1 from pg_tables where tablename = 'users'")
      .then(async (r) => (r.rowCount ? (await c.query('select 1 from users limit 1')).rowCount : 0))
      .finally(() => c.end());
    if (half) throw new Error(`${KEPT} holds rows but no finished seed: drop it and run again`);
  }
  const server = await startTestServer({
    ...(keptUrl ? { databaseUrl: keptUrl } : {}),
    // Priced like a real model so each chat call writes its `usage` ledger row.
    env: {
      MODEL_PRICE_INPUT: '100000',
      MODEL_PRICE_OUTPUT: '100000',
      RATE_LIMIT_IP_PER_MIN: '1000000',
      // The chat route is measured at BENCH_CONNECTIONS calls at once, all in one client.
      ORG_MAX_CONCURRENCY: '64',
    },
  });
  let measured: Measured;
  let session: string;
  let counts: unknown = stored?.counts ?? null;
  if (stored) {
    measured = stored.measured;
    ({ token: session } = await issueSession(server.deps.db, server.deps.keys.session, measured.userId));
  } else {
    const user = await createUser(server);
    measured = { userId: user.userId, orgKey: user.orgKey, clientId: user.clientId };
    session = user.session;
  }
  // Minting a token revokes the person's earlier one in the client (a kept database's last run's).
  const { secret } = await createApiToken(server, measured, measured.orgKey, 'bench');
  // Enough tokens for every chat call of the run: the trial's 50,000 pay for ~1,900 of the bench's
  // calls, which a quiet machine makes in under a second (then 402s, and the run does not count).
  await setOrgBalance(server, measured.orgKey, 1_000_000_000);
  if (!stored) {
    // Two pages (of 20) of projects and calls of their own on both sides, so that on the empty side too a
    // first page and a page after a cursor are whole pages: with 3 of each, the empty side's pages held
    // 3 rows or none, and the ratio compared 20 rows (joined and serialized) with 3 or 0.
    for (let i = 0; i < OWN_ITEMS; i++) {
      const res = await fetch(`${server.url}/v1/projects`, {
        method: 'POST',
        headers: { authorization: `Bearer ${session}`, 'content-type': 'application/json' },
        body: JSON.stringify({ org_id: measured.clientId, name: `bench ${i}` }),
      });
      if (res.status !== 200) throw new Error(`POST /v1/projects answered ${res.status}`);
    }
    for (let i = 0; i < OWN_ITEMS; i++) {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 }),
      });
      if (res.status !== 200) throw new Error(`POST /v1/chat/completions answered ${res.status}`);
      await res.text();
    }
  }
  if (users === 0) {
    // The empty side is the measured client alone: no other client, but as many ledger rows of its own as
    // the offset page skips and more, so that its offset page skips as many rows as the big side's (the
    // issue: an offset page costs no more than the same offset in an organization alone).
    const c = new pg.Client({ connectionString: server.databaseUrl });
    await c.connect();
    try {
      await seedScale(c, {
        users: 0,
        measured: { userId: measured.userId, orgKey: measured.orgKey },
        measuredRows: Number(process.env.BENCH_ALONE_ROWS ?? 0),
        measuredAuditEvents: Number(process.env.BENCH_ALONE_ROWS ?? 0),
        measuredProjects: 0,
      });
    } finally {
      await c.end();
    }
  }
  if (users > 0 && !stored) {
    const started = Date.now();
    const c = new pg.Client({ connectionString: server.databaseUrl });
    await c.connect();
    try {
      counts = await seedScale(c, {
        users,
        measured: { userId: measured.userId, orgKey: measured.orgKey },
        progress: (line) =>
          process.stderr.write(`  [big] ${line} (${((Date.now() - started) / 1000).toFixed(0)} s)\n`),
      });
      if (keptUrl)
        await c.query('insert into bench_scale_seed (id, measured, counts, seconds) values (1, $1, $2, $3)', [
          JSON.stringify(measured),
          JSON.stringify(counts),
          (Date.now() - started) / 1000,
        ]);
    } finally {
      await c.end();
    }
  }
  // BENCH_CPU_PROF=<file>: the empty side's V8 CPU profile over the routes' load (bench/cpu-profile.ts).
  const stopProfile = users === 0 ? await startCpuProfile() : async () => {};
  announce({
    url: server.url,
    databaseUrl: server.databaseUrl,
    token: secret,
    session,
    clientId: measured.clientId,
    counts,
    reused: Boolean(stored),
    adopted,
  });
  process.on(
    'SIGTERM',
    () => void stopProfile().finally(() => server.close().finally(() => process.exit(0))),
  );
} else {
  await main();
}

interface Figures {
  rps: number;
  p50: number;
  errors: number;
  requests: number;
  seconds: number;
  /** CPU the side's svc process and its PostgreSQL backends spent during the load, µs. */
  svcUs: number;
  postgresUs: number;
}

interface Side {
  url: string;
  databaseUrl: string;
  token: string;
  session: string;
  clientId: string;
  /** The side's svc process (set by the parent). */
  pid: number;
}

async function load(
  side: Side,
  route: Route,
  seconds: number,
  connections: number,
  cursor: string,
): Promise<Figures> {
  const { default: autocannon } = await import('autocannon');
  const path = route.path(side).replace('{cursor}', encodeURIComponent(cursor));
  const svcBefore = processCpuUs(side.pid);
  const backendsBefore = await backendsCpuUs(side.databaseUrl);
  const result = await autocannon({
    url: `${side.url}${path}`,
    method: route.body ? 'POST' : 'GET',
    headers: {
      'accept-encoding': 'identity',
      authorization: `Bearer ${route.auth === 'token' ? side.token : side.session}`,
      ...(route.body ? { 'content-type': 'application/json' } : {}),
    },
    ...(route.body ? { body: JSON.stringify(route.body) } : {}),
    connections,
    duration: seconds,
  });
  const svcUs = processCpuUs(side.pid) - svcBefore;
  const postgresUs = backendsSpentUs(backendsBefore, await backendsCpuUs(side.databaseUrl));
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    errors: result.errors + result.timeouts + result.non2xx,
    requests: result.requests.total,
    seconds: result.duration,
    svcUs,
    postgresUs,
  };
}

/** A side's rounds of one route as one figure: requests over time, the median p50, CPU per request. */
function combined(rounds: Figures[]) {
  const requests = rounds.reduce((n, f) => n + f.requests, 0);
  const p50s = rounds.map((f) => f.p50).sort((a, b) => a - b);
  return {
    rps: requests / rounds.reduce((n, f) => n + f.seconds, 0),
    p50: p50s[Math.floor(p50s.length / 2)]!,
    errors: rounds.reduce((n, f) => n + f.errors, 0),
    svcUsPerRequest: rounds.reduce((n, f) => n + f.svcUs, 0) / Math.max(requests, 1),
    postgresUsPerRequest: rounds.reduce((n, f) => n + f.postgresUs, 0) / Math.max(requests, 1),
  };
}

/** What a side's svc child announces. */
type Announced = Omit<Side, 'pid'> & { counts: unknown; reused: boolean; adopted: string[] };

interface Route {
  name: string;
  path: (s: Side) => string;
  auth: 'token' | 'session';
  body?: unknown;
  /** A list whose `starting_after` page is measured from an item this deep (found before timing). */
  cursorAt?: { list: (s: Side) => string; depth: number; id: string };
}

async function cursorFor(side: Side, route: Route): Promise<string> {
  if (!route.cursorAt) return '';
  const { list, depth, id } = route.cursorAt;
  // The item `depth` deep, or the last one of a shorter list (the empty database's lists are short).
  for (let offset = depth; offset >= 0; offset = offset === 0 ? -1 : Math.floor(offset / 10)) {
    const res = await fetch(`${side.url}${list(side)}&limit=1&offset=${offset}`, {
      headers: { authorization: `Bearer ${side.session}` },
    });
    const body = (await res.json()) as { data?: Record<string, unknown>[] } | Record<string, unknown>[];
    const items = Array.isArray(body) ? body : (body.data ?? []);
    if (items[0]) return String(items[0][id]);
  }
  throw new Error(`${route.name}: the list is empty`);
}

async function withDatabase<T>(databaseUrl: string, fn: (db: Db) => Promise<T>): Promise<T> {
  const database = await openDatabase({ databaseUrl, poolSize: 2, queryTimeoutMs: 0 });
  try {
    return await fn(database.db);
  } finally {
    await database.close();
  }
}

/** One reconcile run: how long, how far, and that it found the ledger sound. */
async function timedReconcile(databaseUrl: string, full: boolean) {
  return withDatabase(databaseUrl, async (db) => {
    const t = Date.now();
    const report = await reconcile(db, createLogger('silent'), null, { full, settleWindowSeconds: 0 });
    const ms = Date.now() - t;
    if (report.violations.length)
      throw new Error(`reconcile found violations: ${JSON.stringify(report.violations).slice(0, 2000)}`);
    return {
      ms,
      mode: report.mode,
      rows: (report.checkpoint.to ?? 0) - (report.checkpoint.from ?? 0),
      pruned: report.prunedHolds,
    };
  });
}

async function withClient<T>(databaseUrl: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: databaseUrl });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

async function main() {
  const ledgerRows = flag('--ledger-rows', 1_000_000, 5_000);
  // Calls written on the big side just before the incremental reconcile (`--new-rows 100000`: the goal is
  // under 5 s after 100,000 new rows); `--reconcile-only` skips the routes.
  const newRows = flag('--new-rows', 0, 0);
  const reconcileOnly = process.argv.includes('--reconcile-only');
  const users = Math.max(100, Math.floor(ledgerRows / 10));
  const seconds = knob('BENCH_SECONDS', 5, 0.5);
  const rounds = knob('BENCH_ROUNDS', 3, 1);
  const connections = knob('BENCH_CONNECTIONS', 10, 4);
  const out = (s: string) => process.stdout.write(`${s}\n`);
  const deep = Math.min(100_000, users);
  const offsetDepth = Math.floor(deep / 10);
  const routes: Route[] = [
    {
      name: 'transactions, first page',
      path: (s) => `/v1/clients/${s.clientId}/credits/transactions`,
      auth: 'session',
    },
    {
      name: `transactions, starting_after ${deep} deep`,
      path: (s) => `/v1/clients/${s.clientId}/credits/transactions?starting_after={cursor}`,
      auth: 'session',
      cursorAt: { list: (s) => `/v1/clients/${s.clientId}/credits/transactions?x=1`, depth: deep, id: 'id' },
    },
    {
      name: `transactions, offset ${offsetDepth}`,
      path: (s) => `/v1/clients/${s.clientId}/credits/transactions?offset=${offsetDepth}`,
      auth: 'session',
    },
    { name: 'projects, first page', path: (s) => `/v1/projects?org_id=${s.clientId}`, auth: 'session' },
    {
      name: `projects, starting_after ${Math.floor(users / 40)} deep`,
      path: (s) => `/v1/projects?org_id=${s.clientId}&starting_after={cursor}`,
      auth: 'session',
      cursorAt: { list: (s) => `/v1/projects?org_id=${s.clientId}`, depth: Math.floor(users / 40), id: 'id' },
    },
    {
      name: 'usage calls, first page',
      path: (s) => `/v1/clients/${s.clientId}/usage/calls`,
      auth: 'session',
    },
    {
      name: `usage calls, starting_after ${deep} deep`,
      path: (s) => `/v1/clients/${s.clientId}/usage/calls?starting_after={cursor}`,
      auth: 'session',
      cursorAt: { list: (s) => `/v1/clients/${s.clientId}/usage/calls?x=1`, depth: deep, id: 'id' },
    },
    {
      // The totals of the default period (30 days up to now): the hourly rollup (docs/usage.md).
      name: 'usage totals by day, 30 days',
      path: (s) => `/v1/clients/${s.clientId}/usage`,
      auth: 'session',
    },
    {
      name: 'usage totals by member, 30 days',
      path: (s) => `/v1/clients/${s.clientId}/usage?group_by=member`,
      auth: 'session',
    },
    // The audit log (CONTRACT §11): the measured client's chain of 2N events among N × 10 of the others
    // (bench/scale-seed.ts: synthetic hashes; listing does not read the chain).
    {
      name: 'audit events, first page',
      path: (s) => `/v1/clients/${s.clientId}/audit-events`,
      auth: 'session',
    },
    {
      name: `audit events, starting_after ${deep} deep`,
      path: (s) => `/v1/clients/${s.clientId}/audit-events?starting_after={cursor}`,
      auth: 'session',
      cursorAt: { list: (s) => `/v1/clients/${s.clientId}/audit-events?x=1`, depth: deep, id: 'id' },
    },
    {
      name: `audit events, action, ${Math.floor(deep / 5)} deep`,
      path: (s) => `/v1/clients/${s.clientId}/audit-events?action=limits.set&starting_after={cursor}`,
      auth: 'session',
      cursorAt: {
        list: (s) => `/v1/clients/${s.clientId}/audit-events?action=limits.set`,
        depth: Math.floor(deep / 5),
        id: 'id',
      },
    },
    { name: 'GET /v1/auth/verify', path: () => '/v1/auth/verify', auth: 'token' },
    { name: 'GET /v1/owner/balance', path: () => '/v1/owner/balance', auth: 'session' },
    {
      name: 'credits/balance',
      path: (s) => `/v1/clients/${s.clientId}/credits/balance`,
      auth: 'session',
    },
    { name: 'GET /v1/clients', path: () => '/v1/clients', auth: 'session' },
    {
      name: 'POST /v1/chat/completions',
      path: () => '/v1/chat/completions',
      auth: 'token',
      body: { model: 'x', messages: [{ role: 'user', content: 'hi' }], max_tokens: 16 },
    },
  ];

  out(
    `bench scale: ${ledgerRows} ledger rows requested (${users} other users), PostgreSQL ${new URL(ADMIN).host}`,
  );
  const started = Date.now();
  const empty = await startChild<Announced>(['--import', 'tsx', here], {
    BENCH_ROLE: 'svc',
    BENCH_SEED_USERS: '0',
    BENCH_ALONE_ROWS: String(offsetDepth + 1_000),
  });
  let big: Awaited<ReturnType<typeof startChild<Announced>>> | undefined;
  try {
    big = await startChild<Announced>(['--import', 'tsx', here], {
      BENCH_ROLE: 'svc',
      BENCH_SEED_USERS: String(users),
    });
    out(
      `  ${big.info.reused ? `reused ${KEPT} (seeded before)` : 'seeded'} in ${((Date.now() - started) / 1000).toFixed(1)} s: ${JSON.stringify(big.info.counts)}`,
    );
    for (const line of big.info.adopted) out(`  ${KEPT} brought up to this tree's migrations: ${line}`);
    if (process.argv.includes('--seed-only')) return;
    const sides = {
      empty: { ...empty.info, pid: empty.child.pid! },
      big: { ...big.info, pid: big.child.pid! },
    };
    out(
      `  ${rounds} round(s) of ${seconds} s per route and side, ${connections} connections; the sides take turns, the first one alternating`,
    );
    out(
      `  ${'route'.padEnd(40)} ${'empty req/s'.padStart(11)} ${'big req/s'.padStart(10)} ${'ratio'.padStart(7)} ${'rounds'.padStart(11)}   p50 empty → big   svc µs/req   PG µs/req   errors`,
    );
    // The full check first, on a kept database too (it stores a fresh checkpoint, so the incremental
    // run below reads only this run's rows); the incremental one after the routes' writes.
    const full = {
      empty: await timedReconcile(sides.empty.databaseUrl, true),
      big: await timedReconcile(sides.big.databaseUrl, true),
    };
    let failed = false;
    // `--only <words>`: the routes whose name has those words (a route's figures again, without the rest);
    // `--only 'clients|balance'`: the routes whose name has any of them.
    const only = process.argv.includes('--only')
      ? process.argv[process.argv.indexOf('--only') + 1]?.split('|')
      : undefined;
    const chosen = routes.filter((r) => !only || only.some((words) => r.name.includes(words)));
    for (const route of reconcileOnly ? [] : chosen) {
      const cursors = { empty: await cursorFor(sides.empty, route), big: await cursorFor(sides.big, route) };
      const runs = await inTurns(rounds, ['empty', 'big'] as const, (k) =>
        load(sides[k], route, seconds, connections, cursors[k]),
      );
      const e = combined(runs.empty);
      const b = combined(runs.big);
      if (e.errors || b.errors) failed = true;
      const perRound = runs.big.map((f, i) => f.rps / Math.max(runs.empty[i]!.rps, 1e-9));
      const spread = `${Math.min(...perRound).toFixed(2)}–${Math.max(...perRound).toFixed(2)}`;
      const us = (x: number, y: number) => `${x.toFixed(0)} → ${y.toFixed(0)}`;
      out(
        `  ${route.name.padEnd(40)} ${e.rps.toFixed(0).padStart(11)} ${b.rps.toFixed(0).padStart(10)} ${(b.rps / Math.max(e.rps, 1e-9)).toFixed(2).padStart(6)}× ${spread.padStart(11)}   ${String(e.p50).padStart(5)} → ${String(b.p50).padEnd(5)} ms   ${us(e.svcUsPerRequest, b.svcUsPerRequest).padStart(11)}   ${us(e.postgresUsPerRequest, b.postgresUsPerRequest).padStart(9)}   ${e.errors}/${b.errors}`,
      );
    }
    if (newRows > 0) {
      const t = Date.now();
      await withClient(sides.big.databaseUrl, (c) =>
        seedNewCalls(c, { users, count: newRows, tag: Date.now().toString(36) }),
      );
      out(`  ${newRows} new calls written on the big side in ${((Date.now() - t) / 1000).toFixed(1)} s`);
    }
    const inc = {
      empty: await timedReconcile(sides.empty.databaseUrl, false),
      big: await timedReconcile(sides.big.databaseUrl, false),
    };
    if (inc.empty.mode !== 'incremental' || inc.big.mode !== 'incremental')
      throw new Error('reconcile was not incremental');
    out(
      `  reconcile --full:      ${full.empty.ms} → ${full.big.ms} ms (empty → big), ${full.big.rows} ledger rows`,
    );
    out(
      `  reconcile incremental: ${inc.empty.ms} → ${inc.big.ms} ms, after ${inc.empty.rows} / ${inc.big.rows} new ledger rows, ${inc.big.pruned} holds pruned`,
    );
    if (failed) {
      out('  some requests failed (errors column): the run does not count');
      process.exitCode = 1;
    }
  } finally {
    if (big) await stopChild(big.child);
    await stopChild(empty.child);
  }
}
