// `npm run bench -- oauth`: refresh-token grant throughput and p99 latency on loopback, svc's
// /oauth/token beside panva's oidc-provider configured for the same grant (public client, refresh token
// rotated on every use, an ES256 JWT access token for one resource), on the same machine in the same
// run, with the same load loop; printed as a ratio.
//
// Each of BENCH_CONCURRENCY workers holds its own refresh token and refreshes it in a loop, always
// presenting the token it got last: BENCH_ROUNDS rounds (default 3) of BENCH_SECONDS (5) per server,
// the servers taking turns with the first alternating, after a one-second warm-up of each.
// svc runs on a throw-away PostgreSQL database (BENCH_DATABASE_URL, an admin URL; default
// postgres://postgres@127.0.0.1:5432/test), or on PGlite when that is unreachable. oidc-provider runs
// with its built-in in-memory adapter (its default), so it does no I/O at all: the ratio is against an
// in-memory ceiling, and svc pays for a database round trip per refresh (read, rotate, insert successor).
// Both servers share this process with the load loop, serving the whole run: beside each one's throughput
// the bench prints the process's CPU per refresh over its phase (server and load loop: the loop is the
// same for both, so the difference is the servers'), and svc's statements and PostgreSQL backend CPU
// per refresh (bench/mcp-cost.ts) — figures a loaded machine moves far less than req/s.
// BENCH_PROFILE=1 writes a V8 CPU profile of svc's first measured round (the process: server and load loop)
// into ./bench-profiles, for Chrome DevTools or speedscope.
import { mkdirSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Session } from 'node:inspector/promises';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { exportJWK, generateKeyPair } from 'jose';
import { loadConfig } from '../src/config.js';
import { openDatabase } from '../src/db/client.js';
import { runMigrations } from '../src/db/migrate.js';
import { createDeps } from '../src/create-deps.js';
import { createLogger } from '../src/log.js';
import { startServer } from '../src/server.js';
import { registerAccount } from '../src/accounts/service.js';
import { randomToken } from '../src/ids.js';
import { issueApproval } from '../oauth/token-issue.js';
import { SYSTEM_ORIGIN } from '../src/audit/context.js';
import { knob } from './knobs.js';
import { inTurns } from './turns.js';
import { countStatements, perRequest, readCost, serveCost, type Cost } from './mcp-cost.js';

const SECONDS = knob('BENCH_SECONDS', 5, 1);
const WARMUP = knob('BENCH_WARMUP', 1, 0);
const CONCURRENCY = knob('BENCH_CONCURRENCY', 8, 4);
const ROUNDS = knob('BENCH_ROUNDS', 3, 1);
const ADMIN = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const PROFILE = Boolean(process.env.BENCH_PROFILE);

interface Result {
  name: string;
  requests: number;
  /** Per refresh over the measured phase: process CPU µs, PostgreSQL backend CPU µs, statements. */
  cost: ReturnType<typeof perRequest>;
  errors: number;
  perSecond: number;
  p50: number;
  p99: number;
}

const quantile = (sorted: number[], q: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;

/** A server under test: where its token endpoint is, its workers' token chains, its cost probe. */
interface Target {
  name: string;
  tokenUrl: string;
  /** One refresh token per worker, always the last one it got. */
  tokens: string[];
  clientId: string;
  costUrl: string;
  close(): Promise<void>;
}

/** One measured stretch of a target: its refreshes, latencies, errors and cost. */
interface Stretch {
  latencies: number[];
  errors: number;
  seconds: number;
  before: Cost;
  after: Cost;
}

/** The load loop: each worker refreshes its own token chain for `seconds`. */
async function run(target: Target, seconds: number, record: boolean): Promise<Stretch> {
  const refreshOnce = async (i: number) => {
    const res = await fetch(target.tokenUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'accept-encoding': 'identity' },
      body: new URLSearchParams({
        grant_type: 'refresh_token',
        refresh_token: target.tokens[i]!,
        client_id: target.clientId,
      }),
    });
    const body = (await res.json()) as { refresh_token?: string; access_token?: string };
    if (res.status !== 200 || !body.refresh_token || !body.access_token) return false;
    target.tokens[i] = body.refresh_token;
    return true;
  };
  const latencies: number[] = [];
  let errors = 0;
  const before: Cost = await readCost(target.costUrl);
  const started = performance.now();
  const deadline = started + seconds * 1000;
  await Promise.all(
    target.tokens.map(async (_, i) => {
      while (performance.now() < deadline) {
        const t0 = performance.now();
        const ok = await refreshOnce(i);
        if (record) latencies.push(performance.now() - t0);
        if (!ok) errors++;
        if (!ok && errors > 50) throw new Error(`${target.name}: refreshes keep failing`);
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  return { latencies, errors, seconds: elapsed, before, after: await readCost(target.costUrl) };
}

/** A target's rounds as one result: every round's refreshes over every round's time. */
function combined(name: string, stretches: Stretch[]): Result {
  const latencies = stretches.flatMap((x) => x.latencies).sort((a, b) => a - b);
  const cost = stretches
    .map((x) => perRequest(x.before, x.after, 1))
    .reduce((sum, c) => ({
      cpuUs: sum.cpuUs + c.cpuUs,
      postgresUs: sum.postgresUs + c.postgresUs,
      statements: sum.statements + c.statements,
    }));
  const n = Math.max(latencies.length, 1);
  return {
    name,
    requests: latencies.length,
    cost: { cpuUs: cost.cpuUs / n, postgresUs: cost.postgresUs / n, statements: cost.statements / n },
    errors: stretches.reduce((e, x) => e + x.errors, 0),
    perSecond: latencies.length / stretches.reduce((t, x) => t + x.seconds, 0),
    p50: quantile(latencies, 0.5),
    p99: quantile(latencies, 0.99),
  };
}

/** A CPU profile of this process from now until stop(), written to bench-profiles/oauth-<name>-<time>.cpuprofile. */
async function startProfile() {
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  return {
    async stop(name: string) {
      const { profile } = await session.post('Profiler.stop');
      mkdirSync('bench-profiles', { recursive: true });
      const file = `bench-profiles/oauth-${name}-${Date.now()}.cpuprofile`;
      writeFileSync(file, JSON.stringify(profile));
      session.disconnect();
      console.log(`CPU profile of ${name}'s phase: ${file}`);
    },
  };
}

/** svc on a throw-away database, serving; `close` stops it and drops the database. */
async function svcTarget(): Promise<Target & { storage: string }> {
  let databaseUrl: string | undefined;
  let drop = async () => {};
  try {
    const admin = new pg.Client({ connectionString: ADMIN });
    await admin.connect();
    const name = `svc_bench_${randomToken(6)}`;
    await admin.query(`create database "${name}"`);
    await admin.end();
    const url = new URL(ADMIN);
    url.pathname = `/${name}`;
    databaseUrl = url.toString();
    drop = async () => {
      const c = new pg.Client({ connectionString: ADMIN });
      await c.connect();
      await c.query(`drop database if exists "${name}" with (force)`);
      await c.end();
    };
  } catch {
    databaseUrl = undefined; // PostgreSQL unreachable: embedded PGlite
  }
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  const port = (probe.address() as AddressInfo).port;
  await new Promise((r) => probe.close(r));
  const origin = `http://127.0.0.1:${port}`;
  const config = loadConfig({
    PORT: String(port),
    BASE_URL: origin,
    V2_URL: origin,
    LIGHT_URL: origin,
    DATA_DIR: 'memory://',
    LOG_LEVEL: 'silent',
    ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
  });
  const database = await openDatabase({ databaseUrl, dataDir: 'memory://', poolSize: 20 });
  await runMigrations(database);
  const deps = await createDeps(config, database, createLogger('silent'));
  const running = await startServer(deps, ['127.0.0.1'], port);
  const close = async () => {
    await running.close();
    await deps.close();
    await database.close();
    await drop();
  };
  try {
    const { user, org } = await registerAccount(
      deps.db,
      { email: 'bench@example.test', name: 'Bench', password: 'correct-Horse-9' },
      deps.hooks.accountCreated,
    );
    const tokens: string[] = [];
    for (let i = 0; i < CONCURRENCY; i++) {
      const issued = await issueApproval(deps, {
        clientId: 'svc-cli',
        userId: user.id,
        orgKey: org.id,
        issuer: origin,
        resources: ['platform'],
        named: null,
        auditOrigin: SYSTEM_ORIGIN,
      });
      tokens.push(issued.top.refresh_token);
    }
    return {
      name: 'svc',
      tokenUrl: `${origin}/oauth/token`,
      tokens,
      clientId: 'svc-cli',
      costUrl: await serveCost(databaseUrl),
      close,
      storage: database.kind,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

/** The part of oidc-provider's API this bench uses (no type declarations ship with it). */
interface OidcProvider {
  callback(): (req: IncomingMessage, res: ServerResponse) => void;
  Client: { find(id: string): Promise<unknown> };
  Grant: new (init: { accountId: string; clientId: string }) => {
    addOIDCScope(scope: string): void;
    addResourceScope(resource: string, scope: string): void;
    save(): Promise<string>;
  };
  RefreshToken: new (init: Record<string, unknown>) => { save(): Promise<string> };
}

/** oidc-provider on its in-memory adapter, serving; `close` stops it. */
async function peerTarget(): Promise<Target> {
  const peerModule = 'oidc-provider';
  const { default: Provider } = (await import(peerModule)) as {
    default: new (issuer: string, config: unknown) => OidcProvider;
  };
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  const jwk = { ...(await exportJWK(privateKey)), alg: 'ES256', use: 'sig', kid: 'bench' };
  const server: Server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const resource = `${issuer}/mcp/platform`;
  const ttl = {
    AccessToken: 900,
    RefreshToken: 30 * 86400,
    Grant: 30 * 86400,
    IdToken: 3600,
    Session: 3600,
    Interaction: 600,
    AuthorizationCode: 60,
  };
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: 'bench',
        token_endpoint_auth_method: 'none',
        grant_types: ['authorization_code', 'refresh_token'],
        redirect_uris: ['http://127.0.0.1/cb'],
        response_types: ['code'],
        id_token_signed_response_alg: 'ES256',
      },
    ],
    findAccount: (_ctx: unknown, id: string) => ({ accountId: id, claims: () => ({ sub: id }) }),
    jwks: { keys: [jwk] },
    scopes: ['offline_access', 'platform'],
    ttl,
    features: {
      resourceIndicators: {
        enabled: true,
        defaultResource: () => resource,
        useGrantedResource: () => true,
        getResourceServerInfo: () => ({
          scope: 'platform',
          audience: resource,
          accessTokenTTL: 900,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'ES256' } },
        }),
      },
    },
    rotateRefreshToken: true,
    issueRefreshToken: () => true,
  });
  server.on('request', provider.callback());
  const close = () => new Promise<void>((r) => server.close(() => r()));
  try {
    const client = await provider.Client.find('bench');
    const tokens: string[] = [];
    for (let i = 0; i < CONCURRENCY; i++) {
      const grant = new provider.Grant({ accountId: `user${i}`, clientId: 'bench' });
      grant.addOIDCScope('offline_access');
      grant.addResourceScope(resource, 'platform');
      const grantId = await grant.save();
      const rt = new provider.RefreshToken({
        accountId: `user${i}`,
        client,
        grantId,
        scope: 'offline_access platform',
        resource,
        gty: 'authorization_code',
      });
      tokens.push(await rt.save());
    }
    return {
      name: 'oidc-provider',
      tokenUrl: `${issuer}/token`,
      tokens,
      clientId: 'bench',
      costUrl: await serveCost(undefined),
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

countStatements();
const ms = (v: number) => `${v.toFixed(2)} ms`;
console.log(
  `oauth bench: refresh_token grant, ${CONCURRENCY} workers, ${ROUNDS} rounds of ${SECONDS} s per server, taking turns (after ${WARMUP} s warm-up each), node ${process.version}`,
);
// Both servers serve for the whole run and take turns, the first alternating (peer, svc; svc, peer; …),
// so that a drift of the machine falls on both alike: one stretch each, one after the other, moved the
// ratio between ×0.78 and ×1.36 in four quiet runs of the same code (docs/oauth.md).
const peerSide = await peerTarget();
const svcSide = await svcTarget();
const targets = { peer: peerSide, svc: svcSide };
let stretches: Record<'peer' | 'svc', Stretch[]>;
try {
  if (WARMUP) for (const t of [peerSide, svcSide]) await run(t, WARMUP, false);
  stretches = await inTurns(ROUNDS, ['peer', 'svc'] as const, async (k, round) => {
    const profiler = PROFILE && k === 'svc' && round === 0 ? await startProfile() : null;
    const stretch = await run(targets[k], SECONDS, true);
    if (profiler) await profiler.stop(targets[k].name);
    return stretch;
  });
} finally {
  await svcSide.close();
  await peerSide.close();
}
const peer = combined(peerSide.name, stretches.peer);
const svc = { ...combined(svcSide.name, stretches.svc), storage: svcSide.storage };
const rate = (x: Stretch) => x.latencies.length / x.seconds;
const roundRatios = stretches.svc.map((x, i) => rate(x) / rate(stretches.peer[i]!));
for (const r of [svc, peer]) {
  console.log(
    `${r.name.padEnd(14)} ${r.perSecond.toFixed(0).padStart(7)} req/s   p50 ${ms(r.p50).padStart(10)}   p99 ${ms(r.p99).padStart(10)}   ${r.requests} requests, ${r.errors} errors`,
  );
}
for (const r of [svc, peer]) {
  console.log(
    `${r.name.padEnd(14)} process CPU ${r.cost.cpuUs.toFixed(0).padStart(5)} µs/refresh (server + load loop)` +
      (r === svc && svc.storage === 'postgres'
        ? `   PostgreSQL backends ${r.cost.postgresUs.toFixed(0)} µs/refresh   statements ${r.cost.statements.toFixed(2)}/refresh`
        : ''),
  );
}
const ratio = { throughput: svc.perSecond / peer.perSecond, p99: svc.p99 / peer.p99 };
console.log(
  `svc (${svc.storage}) / oidc-provider (memory adapter): throughput ×${ratio.throughput.toFixed(2)} (rounds ×${Math.min(...roundRatios).toFixed(2)}–×${Math.max(...roundRatios).toFixed(2)}), p99 ×${ratio.p99.toFixed(2)}`,
);
mkdirSync('bench/results', { recursive: true });
writeFileSync(
  'bench/results/oauth.json',
  JSON.stringify(
    {
      at: new Date().toISOString(),
      seconds: SECONDS,
      rounds: ROUNDS,
      concurrency: CONCURRENCY,
      svc,
      peer,
      ratio,
    },
    null,
    2,
  ),
);
// Every refresh must have succeeded: a rotated chain that broke is a bug, not noise.
process.exit(svc.errors + peer.errors > 0 ? 1 : 0);
