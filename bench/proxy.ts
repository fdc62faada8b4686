// `npm run bench -- proxy`: one fake OpenAI-compatible provider, measured (a) directly, (b) through svc
// with auth, concurrency leases and exact billing on, (c) through the Portkey open-source gateway — in
// one run, on this machine — and, on PostgreSQL, (d) through the floor under any proxy that asks its
// database before calling the provider (bench/floor-proxy.ts). Figures: max req/s (JSON calls, then
// streams read whole), the CPU per JSON call at max load of each target's process and of the PostgreSQL
// backends serving it, p50/p99 at a paced 200 req/s, and time to the first streamed byte (the proxy's added latency is that minus the direct figure), and the chat JSON
// row: non-streamed calls paced at 200/s open-loop, each timed alone, p50/p99 added over the provider
// (bench/proxy-paced.ts).
//
// Each party runs in its own process (this file with BENCH_ROLE=fake|svc, Portkey's own server), so the
// load generator does not share an event loop with what it measures. svc runs on PostgreSQL, as it is
// deployed: TEST_DATABASE_URL (or DATABASE_URL) when set, else this machine's PostgreSQL at
// postgres://postgres@127.0.0.1:5432/test when it answers (as the other benches default); on the embedded
// PGlite only when no PostgreSQL answers or BENCH_STORAGE=pglite asks for it.
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import type { Result } from 'autocannon';
import { freePort } from '../test/helpers/child-svc.js';
import { announce, startChild, type ProxySvcInfo } from './children.js';
import { backendsSpentUs, ownBackendsCpuUs, processCpuUs } from './proc-cpu.js';
import { startCpuProfile } from './cpu-profile.js';
import { benchDatabaseUrl, knob, smoke } from './knobs.js';
import { STALL_MS } from './idle-probe.js';
import { callFailed, pacedJson } from './proxy-paced.js';

const role = process.env.BENCH_ROLE;
/** The largest limit a key may have (CONTRACT §11: a positive 32-bit integer). */
const LIMIT_MAX = 2_147_483_647;
const here = fileURLToPath(import.meta.url);

if (role === 'fake') {
  const { startFakeUpstream } = await import('../test/helpers/fake-upstream.js');
  const fake = await startFakeUpstream();
  fake.reply = () => ({
    content:
      'The quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps over the lazy dog.',
  });
  // Keep no request log in memory during a long bench.
  setInterval(() => fake.requests.splice(0), 1000).unref();
  announce({ url: fake.url });
} else if (role === 'svc') {
  // An OTLP endpoint in its environment (bench -- ab with BENCH_AB_TRACES=1): traced as src/main.ts
  // traces, started before the server's modules load (CONTRACT §1).
  const { tracesConfigured } = await import('../src/telemetry/spans.js');
  if (tracesConfigured(process.env)) (await import('../src/telemetry/start.js')).startTracing();
  const { startTestServer } = await import('../test/helpers/server.js');
  const { createUser, createApiToken } = await import('../test/helpers/fixtures.js');
  const { setOrgBalance } = await import('../test/helpers/billing.js');
  const { setBalanceWatch } = await import('../src/billing/balance-crossings.js');
  const { FAKE_KEY } = await import('../test/helpers/fake-upstream.js');
  const { client } = await import('../test/helpers/http.js');
  /**
   * Sets the largest RPM and TPM a key may have (CONTRACT §11), through the route an owner uses (which
   * makes this process read them at once): every call is counted in both rolling windows, none refused.
   */
  const limitKey = async (owner: { clientId: string; session: string }, tokenId: number) => {
    const res = await client(server.url).put(
      `/v1/clients/${owner.clientId}/tokens/${tokenId}/limits`,
      { rpm: LIMIT_MAX, tpm: LIMIT_MAX },
      { token: owner.session },
    );
    if (res.status !== 200) throw new Error(`PUT limits: ${res.status}`);
  };
  const server = await startTestServer({
    env: {
      MODEL_UPSTREAM_URL: process.env.FAKE_URL!,
      MODEL_UPSTREAM_KEY: FAKE_KEY,
      MODEL_ID: 'bench-model',
      // Priced like a real model, so every call debits tokens and its settle writes the `usage` ledger row
      // and the sink's balance (at the default prices the fake's ~30 tokens cost 0.02 cents, which rounds
      // to 0 tokens: no ledger row, a lighter settle than any real call's).
      MODEL_PRICE_INPUT: '100000',
      MODEL_PRICE_OUTPUT: '100000',
      // The cap is per organization; one org drives the whole load here.
      ORG_MAX_CONCURRENCY: '1024',
    },
  });
  // One hot organization, plus 16 for the spread run (each org's ledger row is its own lock), plus one
  // whose key has an RPM and a TPM limit set (the limited row), never reached: what counting costs.
  const tokens: string[] = [];
  for (let i = 0; i < 18; i++) {
    const user = await createUser(server);
    const key = await createApiToken(server, user, user.orgKey);
    tokens.push(key.secret);
    await setOrgBalance(server, user.orgKey, 1_000_000_000);
    // BENCH_KEY_LIMITS=1 (an ab side's environment): the hot key limited too.
    if (i === 17 || (i === 0 && process.env.BENCH_KEY_LIMITS === '1')) await limitKey(user, key.id);
    // BENCH_BALANCE_WATCH=1: each org watches a low-balance threshold, so every settle pays the
    // crossing check over a watched account (never crossed here).
    if (process.env.BENCH_BALANCE_WATCH === '1')
      await setBalanceWatch(server.deps.db, user.orgKey, 'alert.low', 1_000);
  }
  // BENCH_MEMORY=1 (bench/memory.ts): SIGUSR2 asks for the heap after a full collection (with --expose-gc).
  if (process.env.BENCH_MEMORY === '1')
    process.on('SIGUSR2', () => {
      (globalThis as { gc?: () => void }).gc?.();
      process.stdout.write(`BENCH_MEM ${JSON.stringify(process.memoryUsage())}\n`);
    });
  const stopProfile = await startCpuProfile();
  announce({
    url: server.url,
    token: tokens[0],
    spread: tokens.slice(1, 17),
    limited: tokens[17],
    storage: server.database.kind,
  });
  process.on(
    'SIGTERM',
    () => void stopProfile().finally(() => server.close().finally(() => process.exit(0))),
  );
} else {
  await main();
}

interface Target {
  name: string;
  url: string;
  headers: Record<string, string>;
  /** Bearer tokens to rotate over (one per organization). */
  rotate?: string[];
  /** The process that serves it: its CPU, and its PostgreSQL backends', are counted per call. */
  pid?: number;
}

async function main() {
  const { default: autocannon } = await import('autocannon');
  const { request } = await import('undici');
  const children: ChildProcess[] = [];
  const stopAll = () => children.forEach((c) => c.kill('SIGTERM'));
  process.on('exit', stopAll);
  try {
    const databaseUrl = await benchDatabaseUrl();
    const fake = await startChild(['--import', 'tsx', here], { BENCH_ROLE: 'fake' });
    children.push(fake.child);
    const svc = await startChild<ProxySvcInfo>(['--import', 'tsx', here], {
      BENCH_ROLE: 'svc',
      FAKE_URL: fake.info.url,
      // An empty value keeps svc on PGlite (test/helpers/server.ts reads a non-empty URL as PostgreSQL).
      TEST_DATABASE_URL: databaseUrl ?? '',
    });
    children.push(svc.child);
    const portkeyPort = await freePort();
    const portkey = await startChild(
      [
        fileURLToPath(new URL('../node_modules/@portkey-ai/gateway/build/start-server.js', import.meta.url)),
        `--port=${portkeyPort}`,
        '--headless',
      ],
      {},
      /Ready for connections()/,
    );
    children.push(portkey.child);
    const { FAKE_KEY } = await import('../test/helpers/fake-upstream.js');
    // The floor (bench/floor-proxy.ts) needs PostgreSQL: one round trip to it is what it measures.
    const floor = databaseUrl
      ? await startChild(['--import', 'tsx', fileURLToPath(new URL('./floor-proxy.ts', import.meta.url))], {
          FLOOR_DATABASE_URL: databaseUrl,
          FAKE_URL: fake.info.url,
        })
      : null;
    if (floor) children.push(floor.child);

    const targets: Target[] = [
      {
        name: 'direct',
        url: `${fake.info.url}/chat/completions`,
        headers: { authorization: `Bearer ${FAKE_KEY}` },
        pid: fake.child.pid,
      },
      ...(floor
        ? [
            {
              name: 'floor (DB round trip + forward)',
              url: `${floor.info.url}/v1/chat/completions`,
              headers: { authorization: `Bearer ${FAKE_KEY}` },
              pid: floor.child.pid,
            },
            {
              // The same, and a durable write before the answer's end (what CONTRACT §9's outcome asks).
              name: 'floor, settled (+ durable write)',
              url: `${floor.info.url}/settled/v1/chat/completions`,
              headers: { authorization: `Bearer ${FAKE_KEY}` },
              pid: floor.child.pid,
            },
          ]
        : []),
      {
        name: 'svc (1 org)',
        url: `${svc.info.url}/v1/chat/completions`,
        headers: { authorization: `Bearer ${svc.info.token}` },
        pid: svc.child.pid,
      },
      {
        name: 'svc (16 orgs)',
        url: `${svc.info.url}/v1/chat/completions`,
        headers: { authorization: `Bearer ${svc.info.spread[0]}` },
        rotate: svc.info.spread,
        pid: svc.child.pid,
      },
      {
        name: 'svc (1 org, key limited)',
        url: `${svc.info.url}/v1/chat/completions`,
        headers: { authorization: `Bearer ${svc.info.limited}` },
        pid: svc.child.pid,
      },
      {
        name: 'portkey',
        url: `http://127.0.0.1:${portkeyPort}/v1/chat/completions`,
        headers: {
          authorization: `Bearer ${FAKE_KEY}`,
          'x-portkey-provider': 'openai',
          'x-portkey-custom-host': fake.info.url,
        },
        pid: portkey.child.pid,
      },
    ];
    const body = (stream: boolean) =>
      JSON.stringify({
        model: 'gpt-4o-mini',
        stream,
        max_tokens: 64,
        messages: [{ role: 'user', content: 'Tell me about foxes.' }],
      });
    const headersOf = (t: Target) => ({
      ...t.headers,
      'content-type': 'application/json',
      'accept-encoding': 'identity',
    });

    // Sanity: every target answers the same body before measuring.
    for (const t of targets) {
      const res = await request(t.url, { method: 'POST', headers: headersOf(t), body: body(false) });
      const text = await res.body.text();
      if (res.statusCode !== 200) throw new Error(`${t.name}: ${res.statusCode} ${text.slice(0, 300)}`);
    }

    const seconds = knob('BENCH_SECONDS', 5, 1);
    // Each target is warmed at the max phase's 32 connections first, long enough for V8 to have optimised
    // its hot path: the first svc target measured otherwise paid for it (bench/README.md, proxy).
    const warmup = knob('BENCH_WARMUP', 3, 0);
    // The second max JSON phase's callers (BENCH_WIDE_CONNECTIONS).
    const wideConnections = knob('BENCH_WIDE_CONNECTIONS', 128, 64);
    const run = (t: Target, opts: Record<string, unknown>) =>
      new Promise<Result>((resolve, reject) => {
        let n = 0;
        const rotate = t.rotate;
        const requests = rotate
          ? [
              {
                setupRequest: (r: { headers: Record<string, string> }) => {
                  r.headers = { ...r.headers, authorization: `Bearer ${rotate[n++ % rotate.length]}` };
                  return r;
                },
              },
            ]
          : undefined;
        autocannon(
          {
            url: t.url,
            method: 'POST',
            headers: headersOf(t),
            body: body(false),
            duration: seconds,
            ...(requests ? { requests } : {}),
            ...opts,
          } as never,
          (err: Error | null, r: Result) => (err ? reject(err) : resolve(r)),
        );
      });

    // Time to the first streamed byte, one call at a time. The targets take turns in blocks of
    // TTFB_BLOCK calls (the first few of each block unrecorded: warm connections and caches), so that
    // every target meets the machine in the same states. Measured one target after the other instead,
    // a drift of the machine between two targets (seen here: 0.5 ms within a minute) would read as
    // latency that one of them adds.
    const TTFB_BLOCK = 50;
    const TTFB_WARM = 5;
    async function firstByte(t: Target): Promise<number> {
      const start = performance.now();
      const res = await request(t.url, { method: 'POST', headers: headersOf(t), body: body(true) });
      let first = 0;
      for await (const chunk of res.body) {
        // eslint-disable-next-line @typescript-eslint/no-unsafe-member-access -- undici's body is a Readable, whose iterator yields `any` (Buffers here)
        if (!first && chunk.length) first = performance.now();
      }
      if (res.statusCode !== 200) throw new Error(`${t.name} stream: ${res.statusCode}`);
      return first - start;
    }
    async function ttfb(all: Target[], samples: number): Promise<Map<string, { p50: number; p99: number }>> {
      const block = Math.min(TTFB_BLOCK, samples);
      const times = new Map(all.map((t) => [t.name, [] as number[]]));
      for (let round = 0; round < Math.ceil(samples / block); round++) {
        for (const t of all) {
          for (let i = 0; i < TTFB_WARM + block; i++) {
            const ms = await firstByte(t);
            if (i >= TTFB_WARM) times.get(t.name)!.push(ms);
          }
        }
      }
      return new Map(
        [...times].map(([name, list]) => {
          list.sort((a, b) => a - b);
          return [
            name,
            {
              p50: list[Math.floor(list.length * 0.5)]!,
              p99: list[Math.min(list.length - 1, Math.floor(list.length * 0.99))]!,
            },
          ];
        }),
      );
    }

    // CPU per call at max load: the target's own process, and the PostgreSQL backends serving its
    // connections (read through a connection of the bench's own, so other work on the server is not
    // counted). The ratio to Portkey's in the same run is the stable figure: absolute CPU per call moves
    // with the machine.
    const { default: pg } = await import('pg');
    const monitor = databaseUrl ? new pg.Client({ connectionString: databaseUrl }) : null;
    monitor?.on('error', () => {});
    await monitor?.connect();
    const postgresPort = databaseUrl ? Number(new URL(databaseUrl).port || 5432) : 0;
    const backends = (t: Target) =>
      monitor ? ownBackendsCpuUs(monitor, t.pid, postgresPort) : Promise.resolve(new Map<number, number>());
    const measured = async (t: Target, stream: boolean, connections = 32) => {
      const cpuBefore = t.pid ? processCpuUs(t.pid) : 0;
      const pgBefore = await backends(t);
      const result = await run(t, { connections, body: body(stream) });
      const cpu = t.pid ? processCpuUs(t.pid) - cpuBefore : 0;
      const postgres = backendsSpentUs(pgBefore, await backends(t));
      const calls = Math.max(1, result.requests.total);
      return { result, cpuPerCall: cpu / calls, postgresPerCall: postgres / calls };
    };

    const rows: Record<string, Record<string, string | number>> = {};
    for (const t of targets) {
      if (warmup) await run(t, { connections: 32, duration: warmup });
      const max = await measured(t, false);
      // At 32 connections svc's group commit is not full (one worker used 0.7 of a core): its most is
      // read again with four times the callers, as Portkey's is (docs/decisions/0168).
      const maxWide = await measured(t, false, wideConnections);
      const maxStream = await measured(t, true);
      // Streams too: each settles as a JSON call does (docs/decisions/0172).
      const maxWideStream = await measured(t, true, wideConnections);
      const maxPhases = [max, maxWide, maxStream, maxWideStream];
      const paced = await run(t, { connections: 16, overallRate: 200 });
      rows[t.name] = {
        'max req/s': Math.round(max.result.requests.average),
        [`max req/s @${wideConnections}`]: Math.round(maxWide.result.requests.average),
        'max streams/s': Math.round(maxStream.result.requests.average),
        [`max streams/s @${wideConnections}`]: Math.round(maxWideStream.result.requests.average),
        'errors (max)': maxPhases.reduce((n, m) => n + m.result.errors + m.result.non2xx, 0),
        'CPU µs/call': Math.round(max.cpuPerCall),
        'PostgreSQL µs/call': Math.round(max.postgresPerCall),
        [`CPU µs/call @${wideConnections}`]: Math.round(maxWide.cpuPerCall),
        [`PostgreSQL µs/call @${wideConnections}`]: Math.round(maxWide.postgresPerCall),
        'p50 ms @200/s': paced.requests.total ? paced.latency.p50 : 'none done',
        'p99 ms @200/s': paced.requests.total ? paced.latency.p99 : 'none done',
        'errors (paced)': paced.errors + paced.non2xx,
      };
      // A wrong answer from svc (not a slow one) fails the bench: it measured something else.
      const failed = maxPhases.reduce((n, m) => n + m.result.non2xx, paced.non2xx);
      if (t.name.startsWith('svc') && failed > 0) process.exitCode = 1;
    }
    await monitor?.end();
    const firsts = await ttfb(targets, knob('BENCH_TTFB_SAMPLES', 400, 20));
    for (const t of targets) {
      const first = firsts.get(t.name)!;
      rows[t.name]!['first byte p50 ms'] = Number(first.p50.toFixed(2));
      rows[t.name]!['first byte p99 ms'] = Number(first.p99.toFixed(2));
    }
    // The chat JSON row: paced open-loop, each call timed alone (bench/proxy-paced.ts).
    let turn = 0;
    const pacedJsonFigures = await pacedJson(
      targets.map((t) => ({
        name: t.name,
        async call() {
          const headers: Record<string, string> = headersOf(t);
          if (t.rotate) headers.authorization = `Bearer ${t.rotate[turn++ % t.rotate.length]}`;
          const res = await request(t.url, { method: 'POST', headers, body: body(false) });
          const text = await res.body.text();
          if (res.statusCode !== 200) throw callFailed(t.name, res.statusCode, text);
        },
      })),
      {
        rate: knob('BENCH_PACED_RATE', 200, 200),
        samples: knob('BENCH_PACED_SAMPLES', 2_000, 40),
        per: knob('BENCH_PACED_BLOCK', 200, 20),
        warm: smoke ? 2 : 10,
      },
    );
    for (const t of targets) {
      const p = pacedJsonFigures.get(t.name)!;
      rows[t.name]!['JSON paced p50 ms'] = Number(p.p50.toFixed(2));
      rows[t.name]!['JSON paced p99 ms'] = Number(p.p99.toFixed(2));
      if (t.name.startsWith('svc') && p.errors > 0) process.exitCode = 1;
    }
    const direct = rows.direct!;
    for (const name of Object.keys(rows).filter((n) => n !== 'direct')) {
      rows[name]!['adds to first byte (p50 ms)'] = Number(
        (Number(rows[name]!['first byte p50 ms']) - Number(direct['first byte p50 ms'])).toFixed(2),
      );
    }
    for (const name of Object.keys(rows).filter((n) => n !== 'direct')) {
      for (const q of ['p50', 'p99'])
        rows[name]![`JSON adds ${q} ms`] = Number(
          (Number(rows[name]![`JSON paced ${q} ms`]) - Number(direct[`JSON paced ${q} ms`])).toFixed(2),
        );
    }
    if (svc.info.storage !== 'postgres') {
      process.stdout.write(
        '\nnote: svc ran on the embedded PGlite (single-threaded, in-process), not on PostgreSQL as deployed; start PostgreSQL or set TEST_DATABASE_URL for PostgreSQL figures\n',
      );
    }
    process.stdout.write(
      `\nproxy bench (${seconds}s per load phase; svc storage: ${svc.info.storage}; node ${process.version})\n`,
    );
    console.table(rows);
    const portkeyRow = rows.portkey!;
    for (const name of ['svc (1 org)', 'svc (16 orgs)']) {
      const row = rows[name]!;
      const ratio = (k: string) => (Number(row[k]) / Number(portkeyRow[k])).toFixed(2);
      const wide = (k: string) => `${k} @${wideConnections}`;
      /** Of a row's two phases of a kind (32 and wideConnections callers), the one that served more. */
      const most = (r: Record<string, string | number>, k: string) =>
        Number(r[wide(k)]) > Number(r[k]) ? wide(k) : k;
      const mostRatio = (k: string) =>
        (Number(row[most(row, k)]) / Number(portkeyRow[most(portkeyRow, k)])).toFixed(2);
      const throughput = (k: string) =>
        `${ratio(k)}× at 32 connections, ${ratio(wide(k))}× at ${wideConnections}, ${mostRatio(k)}× each side's most`;
      process.stdout.write(
        `${name} / portkey max throughput: JSON ${throughput('max req/s')}; stream ${throughput('max streams/s')}\n`,
      );
      // CPU per call at 32 connections, and in the JSON phase where each side served the most.
      const cpu = (r: Record<string, string | number>, wideCallers: boolean) => {
        const at = (k: string) => Number(r[wideCallers ? wide(k) : k]);
        return { own: at('CPU µs/call'), postgres: at('PostgreSQL µs/call') };
      };
      const cpuRatio = (svcWide: boolean, peerWide: boolean) => {
        const { own, postgres } = cpu(row, svcWide);
        const peer = cpu(portkeyRow, peerWide).own;
        return `svc alone ${(own / peer).toFixed(2)}×, svc + PostgreSQL ${((own + postgres) / peer).toFixed(2)}× (${own} + ${postgres} µs against ${peer} µs)`;
      };
      const atMost = (r: Record<string, string | number>) => most(r, 'max req/s') !== 'max req/s';
      process.stdout.write(
        `${name} / portkey CPU per JSON call at max load: at 32 connections ${cpuRatio(false, false)}; each side's most ${cpuRatio(atMost(row), atMost(portkeyRow))}\n`,
      );
    }
    const rate = knob('BENCH_PACED_RATE', 200, 200);
    for (const name of ['svc (1 org)', 'svc (16 orgs)', 'portkey', 'floor, settled (+ durable write)']) {
      const r = rows[name];
      if (!r) continue;
      process.stdout.write(
        `${name} chat JSON at a paced ${rate} req/s adds over the provider: p50 ${String(r['JSON adds p50 ms'])} ms, p99 ${String(r['JSON adds p99 ms'])} ms\n`,
      );
    }
    // What the machine did meanwhile (bench/idle-probe.ts): a p99 is read beside it.
    for (const t of targets) {
      const { share, longest } = pacedJsonFigures.get(t.name)!.idleStalled;
      process.stdout.write(
        `chat JSON paced, ${t.name}'s blocks: an idle process beside them stalled ≥ ${STALL_MS} ms for ${(100 * share).toFixed(2)}% of the time (longest ${longest.toFixed(1)} ms)\n`,
      );
    }
    // The limits' cost per call: the key-limited org beside the unlimited hot org (both one org, one key).
    const limited = rows['svc (1 org, key limited)']!;
    const unlimited = rows['svc (1 org)']!;
    const delta = (k: string) => (Number(limited[k]) - Number(unlimited[k])).toFixed(2);
    process.stdout.write(
      `key limited / unlimited (1 org): max throughput ${(Number(limited['max req/s']) / Number(unlimited['max req/s'])).toFixed(2)}×, first byte p50 ${delta('first byte p50 ms')} ms, JSON paced p50 ${delta('JSON paced p50 ms')} ms, p99 ${delta('JSON paced p99 ms')} ms\n`,
    );
    const floorRow = rows['floor (DB round trip + forward)'];
    if (floorRow) {
      // svc's own share of its first-byte time: what it adds beyond the hops any read-before-call proxy pays here.
      for (const name of ['svc (1 org)', 'svc (16 orgs)']) {
        const own = Number(rows[name]!['first byte p50 ms']) - Number(floorRow['first byte p50 ms']);
        process.stdout.write(`${name} first byte over the floor: ${own.toFixed(2)} ms\n`);
      }
    }
  } finally {
    stopAll();
  }
}
