// `npm run bench -- oauth`: refresh-token grant throughput and p99 latency on loopback, svc's
// /oauth/token beside panva's oidc-provider configured for the same grant (public client, refresh token
// rotated on every use, an ES256 JWT access token for one resource), on the same machine in the same
// run, with the same load loop; printed as a ratio.
//
// Each of BENCH_CONCURRENCY workers holds its own refresh token and refreshes it in a loop for
// BENCH_SECONDS (after a one-second warm-up), always presenting the token it got last.
// svc runs on a throw-away PostgreSQL database (BENCH_DATABASE_URL, an admin URL; default
// postgres://postgres@127.0.0.1:5432/test), or on PGlite when that is unreachable. oidc-provider runs
// with its built-in in-memory adapter (its default), so it does no I/O at all: the ratio is against an
// in-memory ceiling, and svc pays for a database round trip per refresh (read, rotate, insert successor).
// Both servers share this process with the load loop, one after the other: beside each one's throughput
// the bench prints the process's CPU per refresh over its phase (server and load loop: the loop is the
// same for both, so the difference is the servers'), and svc's statements and PostgreSQL backend CPU
// per refresh (bench/mcp-cost.ts) — figures a loaded machine moves far less than req/s.
// BENCH_PROFILE=1 writes a V8 CPU profile of svc's measured phase (the process: server and load loop)
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
import { knob } from './knobs.js';
import { countStatements, perRequest, readCost, serveCost, type Cost } from './mcp-cost.js';

const SECONDS = knob('BENCH_SECONDS', 5, 1);
const WARMUP = knob('BENCH_WARMUP', 1, 0);
const CONCURRENCY = knob('BENCH_CONCURRENCY', 8, 4);
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

/** The load loop: each worker refreshes its own token chain. */
async function load(
  name: string,
  tokenUrl: string,
  tokens: string[],
  clientId: string,
  costUrl: string,
): Promise<Result> {
  const refreshOnce = async (i: number) => {
    const res = await fetch(tokenUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'accept-encoding': 'identity' },
      body: new URLSearchParams({
        grant_type: 'refresh_token',
        refresh_token: tokens[i]!,
        client_id: clientId,
      }),
    });
    const body = (await res.json()) as { refresh_token?: string; access_token?: string };
    if (res.status !== 200 || !body.refresh_token || !body.access_token) return false;
    tokens[i] = body.refresh_token;
    return true;
  };
  const phase = async (seconds: number, record: boolean) => {
    const latencies: number[] = [];
    let errors = 0;
    const deadline = performance.now() + seconds * 1000;
    await Promise.all(
      tokens.map(async (_, i) => {
        while (performance.now() < deadline) {
          const t0 = performance.now();
          const ok = await refreshOnce(i);
          if (record) latencies.push(performance.now() - t0);
          if (!ok) errors++;
          if (!ok && errors > 50) throw new Error(`${name}: refreshes keep failing`);
        }
      }),
    );
    return { latencies, errors };
  };
  if (WARMUP) await phase(WARMUP, false);
  const profiler = PROFILE && name === 'svc' ? await startProfile() : null;
  const before: Cost = await readCost(costUrl);
  const started = performance.now();
  const { latencies, errors } = await phase(SECONDS, true);
  const elapsed = (performance.now() - started) / 1000;
  const cost = perRequest(before, await readCost(costUrl), latencies.length);
  if (profiler) await profiler.stop(name);
  latencies.sort((a, b) => a - b);
  return {
    name,
    requests: latencies.length,
    cost,
    errors,
    perSecond: latencies.length / elapsed,
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

async function benchSvc(): Promise<Result & { storage: string }> {
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
      });
      tokens.push(issued.top.refresh_token);
    }
    const costUrl = await serveCost(databaseUrl);
    const result = await load('svc', `${origin}/oauth/token`, tokens, 'svc-cli', costUrl);
    return { ...result, storage: database.kind };
  } finally {
    await running.close();
    await deps.close();
    await database.close();
    await drop();
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

async function benchOidcProvider(): Promise<Result> {
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
    return await load('oidc-provider', `${issuer}/token`, tokens, 'bench', await serveCost(undefined));
  } finally {
    await new Promise((r) => server.close(r));
  }
}

countStatements();
const ms = (v: number) => `${v.toFixed(2)} ms`;
console.log(
  `oauth bench: refresh_token grant, ${CONCURRENCY} workers, ${SECONDS} s each (after ${WARMUP} s warm-up), node ${process.version}`,
);
const peer = await benchOidcProvider();
const svc = await benchSvc();
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
  `svc (${svc.storage}) / oidc-provider (memory adapter): throughput ×${ratio.throughput.toFixed(2)}, p99 ×${ratio.p99.toFixed(2)}`,
);
mkdirSync('bench/results', { recursive: true });
writeFileSync(
  'bench/results/oauth.json',
  JSON.stringify(
    { at: new Date().toISOString(), seconds: SECONDS, concurrency: CONCURRENCY, svc, peer, ratio },
    null,
    2,
  ),
);
// Every refresh must have succeeded: a rotated chain that broke is a bug, not noise.
process.exit(svc.errors + peer.errors > 0 ? 1 : 0);
