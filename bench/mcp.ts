// `npm run bench -- mcp`: `tools/call list_projects` on /mcp/platform through the full path (Origin
// check, platform access-token verification with the grant and live-membership reads, acting org,
// McpServer built per request, the project query) beside the MCP SDK v2's bare stateless server (same
// express body parsing, createMcpHandler with a McpServer per request, toNodeHandler) answering a
// constant tool with the same payload, in the same run, over loopback. The call is a 2026-07-28 one.
// Prints req/s, p50 and p99 of each and the ratios.
//
// Each server runs in its own process (this file with BENCH_ROLE=svc|bare), so the load generator does
// not share an event loop with what it measures. svc runs on PostgreSQL as deployed (bench/knobs.ts
// benchDatabaseUrl: the named one, else this machine's when it answers; a fresh database, dropped
// afterwards), on the embedded PGlite when none answers or BENCH_STORAGE=pglite.
// Beside the throughput it prints what a request cost each server (bench/mcp-cost.ts): CPU µs of the
// server process, and on PostgreSQL its backends' CPU and the statements sent — figures that a loaded
// machine moves far less than req/s.
// The servers take turns in BENCH_ROUNDS rounds (default 3) of BENCH_SECONDS (5) each, the order reversed
// every round. BENCH_MCP_B_TREE=<repository root of another checkout> adds a second svc from that tree
// ("svc B", its own database) to the same turns: the A/B figure of a change, with both ratios to bare.
// Knobs: BENCH_SECONDS, BENCH_ROUNDS, BENCH_WARMUP (2), BENCH_CONNECTIONS (16); --smoke: short phases, no
// warm-up (bench/knobs.ts); BENCH_PROFILE=1 writes V8 CPU profiles of svc and of the bare server into ./bench-profiles/svc and
// ./bench-profiles/bare.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { announce, startChild, stopChild } from './children.js';
import { benchDatabaseUrl, knob } from './knobs.js';
import { costLine, countStatements, perRequest, readCost, serveCost } from './mcp-cost.js';

const role = process.env.BENCH_ROLE;
const here = fileURLToPath(import.meta.url);

// A 2026-07-28 (stateless) call: the envelope in `_meta`, the routing headers beside it.
const CALL = {
  jsonrpc: '2.0',
  id: 1,
  method: 'tools/call',
  params: {
    name: 'list_projects',
    arguments: {},
    _meta: {
      'io.modelcontextprotocol/protocolVersion': '2026-07-28',
      'io.modelcontextprotocol/clientInfo': { name: 'bench', version: '1.0.0' },
      'io.modelcontextprotocol/clientCapabilities': {},
    },
  },
};
const MCP_HEADERS = {
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream',
  'mcp-protocol-version': '2026-07-28',
  'mcp-method': 'tools/call',
  'mcp-name': 'list_projects',
};

if (role === 'svc') {
  // test/helpers/server.ts reads TEST_DATABASE_URL; set it only when there is one (bench/knobs.ts).
  const named = await benchDatabaseUrl();
  if (named) process.env.TEST_DATABASE_URL = named;
  else delete process.env.TEST_DATABASE_URL;
  countStatements();
  const { startTestServer } = await import('../test/helpers/server.js');
  const { createUser } = await import('../test/helpers/fixtures.js');
  const { issueTestGrants } = await import('../test/helpers/oauth.js');
  const { createProject } = await import('../src/projects/service.js');
  const server = await startTestServer();
  const user = await createUser(server);
  for (let i = 1; i <= 5; i++) {
    await createProject(
      server.deps.db,
      { userId: user.userId },
      { orgKey: user.orgKey, name: `Project ${i}`, description: 'bench' },
    );
  }
  const { platform } = await issueTestGrants(server, user, { orgKey: user.orgKey, resources: ['platform'] });
  const url = `${server.v2Url}/mcp/platform`;
  const res = await fetch(url, {
    method: 'POST',
    headers: { ...MCP_HEADERS, authorization: `Bearer ${platform}` },
    body: JSON.stringify(CALL),
  });
  const body = (await res.json()) as { result: { structuredContent: unknown } };
  announce({
    url,
    token: platform,
    storage: server.database.kind,
    structured: body.result.structuredContent,
    cost: await serveCost(server.databaseUrl),
  });
  process.on('SIGTERM', () => void server.close().finally(() => process.exit(0)));
} else if (role === 'bare') {
  const { default: express } = await import('express');
  const { McpServer, createMcpHandler } = await import('@modelcontextprotocol/server');
  const { toNodeHandler } = await import('@modelcontextprotocol/node');
  const { z } = await import('zod');
  const structured = JSON.parse(process.env.BENCH_BODY!) as Record<string, unknown>;
  const app = express();
  app.disable('x-powered-by');
  app.use(express.json({ limit: '10mb' }));
  // The SDK v2's stateless serving as its documentation wires it into Express: one handler, a
  // McpServer per request from the factory.
  const handler = createMcpHandler(() => {
    const server = new McpServer({ name: 'bare', version: '1.0.0' });
    server.registerTool(
      'list_projects',
      {
        title: 'List projects',
        inputSchema: z.object({ org_id: z.string().optional() }),
        outputSchema: z.object({ data: z.array(z.any()) }),
      },
      () => ({
        content: [{ type: 'text', text: JSON.stringify(structured) }],
        structuredContent: structured,
      }),
    );
    return server;
  });
  const serve = toNodeHandler(handler);
  app.post('/mcp', (req, res) => void serve(req, res, req.body));
  const cost = await serveCost(undefined);
  const listener = app.listen(0, '127.0.0.1', () => {
    const { port } = listener.address() as { port: number };
    announce({ url: `http://127.0.0.1:${port}/mcp`, cost });
  });
  process.on('SIGTERM', () => listener.close(() => process.exit(0)));
} else {
  await main();
}

interface Figures {
  name: string;
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  requests: number;
  seconds: number;
}

async function load(
  name: string,
  url: string,
  headers: Record<string, string>,
  seconds: number,
  connections: number,
): Promise<Figures> {
  const { default: autocannon } = await import('autocannon');
  const result = await autocannon({
    url,
    method: 'POST',
    headers: { 'accept-encoding': 'identity', ...MCP_HEADERS, ...headers },
    body: JSON.stringify(CALL),
    connections,
    duration: seconds,
  });
  return {
    name,
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.errors + result.timeouts + result.non2xx,
    requests: result.requests.total,
    seconds: result.duration,
  };
}

/** One server's rounds as one figure: all requests over all time, the rounds' median p50 and p99. */
function combined(rounds: Figures[]): Figures {
  const median = (xs: number[]) => xs.slice().sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  const requests = rounds.reduce((n, f) => n + f.requests, 0);
  const seconds = rounds.reduce((n, f) => n + f.seconds, 0);
  return {
    name: rounds[0]!.name,
    rps: requests / seconds,
    p50: median(rounds.map((f) => f.p50)),
    p99: median(rounds.map((f) => f.p99)),
    errors: rounds.reduce((n, f) => n + f.errors, 0),
    requests,
    seconds,
  };
}

interface SvcInfo {
  url: string;
  token: string;
  storage: string;
  structured: unknown;
  cost: string;
}

interface Side {
  name: string;
  url: string;
  headers: Record<string, string>;
  cost: string;
}

type Spent = ReturnType<typeof perRequest>;

async function main() {
  const seconds = knob('BENCH_SECONDS', 5, 1);
  const rounds = knob('BENCH_ROUNDS', 3, 1);
  const warmup = knob('BENCH_WARMUP', 2, 0);
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 16);
  // BENCH_MCP_B_TREE: the repository root of another checkout, served as a second svc ("svc B") beside
  // this tree's, in the same turns: the A/B figure of a change.
  const bTree = process.env.BENCH_MCP_B_TREE;
  const profile = (side: string) =>
    process.env.BENCH_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=bench-profiles/${side}`] : [];
  const children: Awaited<ReturnType<typeof startChild>>['child'][] = [];
  try {
    const svc = await startChild<SvcInfo>([...profile('svc'), '--import', 'tsx', here], {
      BENCH_ROLE: 'svc',
    });
    children.push(svc.child);
    const svcB = bTree
      ? await startChild<SvcInfo>([...profile('svc-b'), '--import', 'tsx', join(bTree, 'bench/mcp.ts')], {
          BENCH_ROLE: 'svc',
        })
      : undefined;
    if (svcB) children.push(svcB.child);
    const bare = await startChild<{ url: string; cost: string }>(
      [...profile('bare'), '--import', 'tsx', here],
      { BENCH_ROLE: 'bare', BENCH_BODY: JSON.stringify(svc.info.structured) },
    );
    children.push(bare.child);
    const svcSide = (name: string, info: SvcInfo): Side => ({
      name,
      url: info.url,
      headers: { authorization: `Bearer ${info.token}` },
      cost: info.cost,
    });
    const sides: Side[] = [
      svcSide(svcB ? 'svc (A: this tree)' : 'svc list_projects', svc.info),
      ...(svcB ? [svcSide('svc (B: other tree)', svcB.info)] : []),
      { name: 'SDK bare, constant tool', url: bare.info.url, headers: {}, cost: bare.info.cost },
    ];
    if (warmup) for (const side of sides) await load('warm-up', side.url, side.headers, warmup, connections);
    // The sides take turns, the order reversed every round (svc, bare; bare, svc; …), so that a drift of
    // the machine falls on all of them: one stretch each moved svc's ratio from 0.52× to 0.72× in three
    // quiet runs.
    const stretches = sides.map(() => [] as { figures: Figures; spent: Spent }[]);
    for (let r = 0; r < rounds; r++) {
      const order = sides.map((_, i) => i);
      if (r % 2 === 1) order.reverse();
      for (const i of order) {
        const side = sides[i]!;
        const before = await readCost(side.cost);
        const figures = await load(side.name, side.url, side.headers, seconds, connections);
        stretches[i]!.push({ figures, spent: perRequest(before, await readCost(side.cost), 1) });
      }
    }
    /** A side's CPU, PostgreSQL CPU and statements over all its rounds, per request. */
    const per = (xs: { spent: Spent }[], n: number): Spent => {
      const sum = (f: (c: Spent) => number) => xs.reduce((t, x) => t + f(x.spent), 0) / Math.max(n, 1);
      return {
        cpuUs: sum((c) => c.cpuUs),
        postgresUs: sum((c) => c.postgresUs),
        statements: sum((c) => c.statements),
      };
    };
    const all = stretches.map((xs) => combined(xs.map((x) => x.figures)));
    const costs = stretches.map((xs, i) => per(xs, all[i]!.requests));
    const b = all.at(-1)!;
    const row = (f: Figures) =>
      `${f.name.padEnd(26)} ${f.rps.toFixed(0).padStart(8)} req/s   p50 ${String(f.p50).padStart(4)} ms   p99 ${String(f.p99).padStart(4)} ms   errors ${f.errors}`;
    const ratioLine = (i: number) => {
      const a = all[i]!;
      const roundRatios = stretches[i]!.map((x, k) => x.figures.rps / stretches.at(-1)![k]!.figures.rps);
      return `ratio ${a.name}/bare: throughput ${(a.rps / b.rps).toFixed(2)}× (rounds ${Math.min(...roundRatios).toFixed(2)}–${Math.max(...roundRatios).toFixed(2)}×), p50 ${(a.p50 / Math.max(b.p50, 1)).toFixed(2)}×, p99 ${(a.p99 / Math.max(b.p99, 1)).toFixed(2)}×`;
    };
    const svcCount = sides.length - 1;
    process.stdout.write(
      [
        `mcp benchmark: tools/call list_projects, ${rounds} rounds of ${seconds}s per server taking turns, ${connections} connections over loopback; svc storage: ${svc.info.storage}`,
        ...all.map(row),
        ...all.slice(0, svcCount).map((_, i) => ratioLine(i)),
        ...(svcB
          ? [
              `A/B: throughput ${(all[0]!.rps / all[1]!.rps).toFixed(2)}×, CPU per request ${(costs[0]!.cpuUs / costs[1]!.cpuUs).toFixed(2)}×`,
            ]
          : [
              `time per request at saturation: svc ${(1000 / all[0]!.rps).toFixed(3)} ms, bare ${(1000 / b.rps).toFixed(3)} ms → auth + database + selection ≈ ${(1000 / all[0]!.rps - 1000 / b.rps).toFixed(3)} ms`,
            ]),
        ...all.map((f, i) => costLine(f.name, costs[i]!, i < svcCount ? svc.info.storage : 'memory')),
      ].join('\n') + '\n',
    );
    if (all.some((f) => f.errors > 0)) process.exitCode = 1;
  } finally {
    for (const child of children.reverse()) await stopChild(child);
  }
}
