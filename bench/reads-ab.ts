// `node --import tsx bench/reads-ab.ts <tree A> <tree B>`: svc CPU per request of the reads a person or a
// credential makes on every portal visit or CLI call (GET /v1/auth/verify with an `svc_` token;
// GET /v1/owner/balance, GET /v1/clients/{id}/credits/balance and GET /v1/clients with a session bearer),
// two trees side by side in one run: each tree's svc is the scale bench's empty side (bench/scale.ts,
// BENCH_ROLE=svc, run from that tree) on its own fresh PostgreSQL database. For each route, a warm-up
// round on each side, then BENCH_ROUNDS rounds (default 4) of BENCH_SECONDS (3) at 10 connections, the
// sides taking turns and the first one alternating. CPU from /proc, so a shared machine moves req/s far
// more than it moves CPU per request. `ONLY='verify|clients'` picks routes.
import { spawn } from 'node:child_process';
import autocannon from 'autocannon';
import { processCpuUs } from './proc-cpu.js';
import { knob } from './knobs.js';
import { parseAs } from '../test/helpers/json.js';

interface Info {
  url: string;
  token: string;
  session: string;
  clientId: string;
}

const trees = process.argv.slice(2);
if (trees.length < 1) throw new Error('usage: bench/reads-ab.ts <tree A> [<tree B>]');
const seconds = knob('BENCH_SECONDS', 3, 0.5);
const rounds = knob('BENCH_ROUNDS', 4, 1);

function start(tree: string): Promise<{ pid: number; info: Info; stop: () => void }> {
  const child = spawn(process.execPath, ['--import', 'tsx', `${tree}/bench/scale.ts`], {
    cwd: tree,
    env: { ...process.env, BENCH_ROLE: 'svc', BENCH_SEED_USERS: '0', BENCH_ALONE_ROWS: '0' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return new Promise((resolve, reject) => {
    let out = '';
    child.once('exit', (code) => reject(new Error(`${tree}: svc exited ${code}`)));
    child.stdout.on('data', (d) => {
      out += d;
      const m = /BENCH_READY (.*)\n/.exec(out);
      if (m) resolve({ pid: child.pid!, info: parseAs<Info>(m[1]!), stop: () => child.kill('SIGTERM') });
    });
  });
}

const routes = [
  { name: 'verify', path: () => '/v1/auth/verify', auth: 'token' },
  { name: 'owner/balance', path: () => '/v1/owner/balance', auth: 'session' },
  {
    name: 'credits/balance',
    path: (i: Info) => `/v1/clients/${i.clientId}/credits/balance`,
    auth: 'session',
  },
  { name: 'clients', path: () => '/v1/clients', auth: 'session' },
].filter((r) => !process.env.ONLY || process.env.ONLY.split('|').includes(r.name));

const sides = [];
for (const tree of trees) sides.push(await start(tree));
try {
  for (const route of routes) {
    const spent = sides.map(() => ({ us: 0, requests: 0, rounds: [] as number[] }));
    for (let round = -1; round < rounds; round++) {
      for (let j = 0; j < sides.length; j++) {
        const i = round % 2 ? sides.length - 1 - j : j;
        const side = sides[i]!;
        const before = processCpuUs(side.pid);
        const result = await autocannon({
          url: side.info.url + route.path(side.info),
          headers: {
            authorization: `Bearer ${route.auth === 'token' ? side.info.token : side.info.session}`,
          },
          connections: 10,
          duration: seconds,
        });
        const us = processCpuUs(side.pid) - before;
        if (result.non2xx || result.errors) throw new Error(`${route.name} on ${trees[i]}: not all 2xx`);
        if (round < 0) continue; // the warm-up
        spent[i]!.us += us;
        spent[i]!.requests += result.requests.total;
        spent[i]!.rounds.push(Math.round(us / result.requests.total));
      }
    }
    const cells = spent.map(
      (s, i) => `${trees[i]}: ${(s.us / s.requests).toFixed(0)} µs/req (${s.rounds.join(', ')})`,
    );
    process.stdout.write(`${route.name.padEnd(16)} ${cells.join('   ')}\n`);
  }
} finally {
  for (const side of sides) side.stop();
}
