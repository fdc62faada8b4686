// `npm run bench -- give-back`: what giving an organization's spare holds back costs a settle of
// that organization arriving at the same moment (src/models/admission/spare-holds.ts: a sweep gives back
// every spare unused for SPARE_IDLE_MS at once). A throw-away database migrated from this tree, one
// organization funded; each round holds BENCH_SPARES holds (the spares) and one more (the call), then
// gives the spares back and settles the call together, in one of three ways, the rounds alternated:
//
// - `alone`: the settle with no give-back beside it (the reference);
// - `one by one`: each spare its own `voidHold`, all sent at once on a connection each (synchronous
//   commits, each taking the account row in turn);
// - `together`: one `voidHolds` statement for all of them, committed without waiting for the flush.
//
// Prints, per way, the settle's p50 / p90 / p99 and the give-back's own p50 (from sending to the last
// answer), and fails when a token is still held at the end. Environment: BENCH_DATABASE_URL (an admin URL;
// else TEST_DATABASE_URL or DATABASE_URL, else this machine's PostgreSQL: it needs one),
// BENCH_ROUNDS (per way, default 200), BENCH_SPARES (default 8).
import { performance } from 'node:perf_hooks';
import { sql } from 'drizzle-orm';
import { queryRows } from '../src/db/client.js';
import { orgAccount } from '../src/billing/ledger.js';
import { reserveMany, settleCredits, voidHold, voidHolds } from '../src/billing/spend.js';
import { percentile } from './proxy-paced.js';
import { knob, LOCAL_POSTGRES, namedDatabaseUrl } from './knobs.js';
import { fundedDatabase } from './funded-database.js';

const ADMIN = process.env.BENCH_DATABASE_URL || namedDatabaseUrl() || LOCAL_POSTGRES;
const ROUNDS = knob('BENCH_ROUNDS', 200, 10);
const SPARES = knob('BENCH_SPARES', 8, 8);
const ORG = 'giveback';
const WAYS = ['alone', 'one by one', 'together'] as const;
type Way = (typeof WAYS)[number];

const funded = await fundedDatabase({
  adminUrl: ADMIN,
  prefix: 'svc_giveback',
  poolSize: SPARES + 2,
  userId: 'usr_giveback',
  orgs: [ORG],
});
try {
  const db = funded.database.db;

  let n = 0;
  const hold = async (count: number) => {
    const ids = Array.from({ length: count }, () => `req_gb${n++}`);
    const held = await reserveMany(
      db,
      ids.map((requestId) => ({
        orgKey: ORG,
        userId: 'usr_giveback',
        requestId,
        minCredits: 60,
        maxCredits: 60,
      })),
    );
    if (held.some((h) => h instanceof Error)) throw new Error('a hold was refused');
    return ids;
  };
  const giveBack: Record<Way, (ids: string[]) => Promise<unknown>> = {
    alone: () => Promise.resolve(),
    'one by one': (ids) => Promise.all(ids.map((id) => voidHold(db, id))),
    together: (ids) => voidHolds(db, ids, { flush: false }),
  };

  /** One round: the settle's latency and the give-back's, in ms. */
  async function round(way: Way): Promise<[number, number]> {
    const [call, ...spares] = await hold(way === 'alone' ? 1 : SPARES + 1);
    const start = performance.now();
    const given = giveBack[way](spares).then(() => performance.now() - start);
    const settled = settleCredits(db, {
      requestId: call!,
      actualCredits: 42,
      description: 'give-back bench',
    }).then(() => performance.now() - start);
    const [settle, back] = await Promise.all([settled, given]);
    return [settle, back];
  }

  const times = new Map(WAYS.map((w) => [w, { settle: [] as number[], back: [] as number[] }]));
  for (let r = -10; r < ROUNDS; r++) {
    for (const way of r % 2 ? [...WAYS].reverse() : WAYS) {
      const [settle, back] = await round(way);
      if (r < 0) continue; // warm-up
      times.get(way)!.settle.push(settle);
      times.get(way)!.back.push(back);
    }
  }
  const [account] = await queryRows<{ held: unknown }>(
    db,
    sql`select held from billing_accounts where id = ${orgAccount(ORG)}`,
  );
  if (Number(account?.held) !== 0)
    throw new Error(`${String(account?.held)} tokens still held after the run`);

  const fixed = (v: number) => +v.toFixed(2);
  process.stdout.write(
    `\ngive-back bench (${SPARES} spares given back beside one settle, ${ROUNDS} rounds a way)\n`,
  );
  console.table(
    Object.fromEntries(
      WAYS.map((way) => {
        const settle = times.get(way)!.settle.sort((a, b) => a - b);
        const back = times.get(way)!.back.sort((a, b) => a - b);
        return [
          way,
          {
            'settle p50 ms': fixed(percentile(settle, 0.5)),
            'settle p90 ms': fixed(percentile(settle, 0.9)),
            'settle p99 ms': fixed(percentile(settle, 0.99)),
            'give-back p50 ms': way === 'alone' ? '—' : fixed(percentile(back, 0.5)),
          },
        ];
      }),
    ),
  );
} finally {
  await funded.drop();
}
