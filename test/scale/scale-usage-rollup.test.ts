import { describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { modelSuite } from '../helpers/model-suite.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { client } from '../helpers/http.js';
import { readJson } from '../helpers/json.js';
import { setOrgBalance } from '../helpers/billing.js';
import { reserveCredits, settleCredits, settleMany, type UsageRecordInput } from '../../src/billing/spend.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { reconcile } from '../../src/billing/reconcile.js';
import { checkSinceCheckpoint } from '../../src/billing/reconcile-checkpoint.js';
import { createLogger } from '../../src/log.js';
import { queryRows } from '../../src/db/client.js';
import { planPeriod } from '../../src/usage/rollup.js';

// The usage API's totals come from usage_rollup, kept by the settle's own statement
// (docs/usage.md "The rollup"), and must equal the records they sum. After mixed calls (svc_ tokens of
// two members, an OAuth grant, a zero-cost call, a burst settled in one statement, a settle replayed,
// settles spread over hours and days), every grouping of many periods (ends inside hours, on hours,
// in the future, both in one hour) equals the same sums computed from the raw records; reconciliation
// checks the rollup against the records, fully and incrementally, and finds a rollup row changed behind
// the settle's back.

const suite = modelSuite();
const api = () => client(suite.server.url);
const HOUR = 3600;

const totals = z.object({
  calls: z.number(),
  prompt_tokens: z.number(),
  completion_tokens: z.number(),
  cached_prompt_tokens: z.number(),
  credits_debited: z.number(),
  cost_cents: z.string(),
});
const summary = z.object({ data: z.array(totals.extend({ key: z.string(), label: z.string() })), totals });
type Totals = z.infer<typeof totals>;

let member: TestUser;

const sdk = (apiKey: string, base = suite.server.url) =>
  new OpenAI({ apiKey, baseURL: `${base}/v1`, maxRetries: 0, timeout: 10_000 });

async function chat(token: string, base?: string) {
  await sdk(token, base).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] });
}

const record = (over: Partial<UsageRecordInput>): UsageRecordInput => ({
  org: suite.owner.orgKey,
  user: suite.owner.userId,
  api_token_id: null,
  oauth_grant_id: null,
  oauth_client_id: null,
  source: 'chat',
  run_id: null,
  model: 'svc-test-model',
  prompt_tokens: 10,
  completion_tokens: 5,
  price_input: 90_000,
  price_output: 180_000,
  duration_ms: 3,
  outcome: 'completed',
  ...over,
});

let n = 0;
/** Calls settled straight through the billing service: several in one statement, one replayed. */
async function settledHere() {
  const inputs = [
    record({ model: 'model-a', prompt_tokens: 3, cached_prompt_tokens: 2, price_cached_input: 9_000 }),
    record({ model: 'model-a', prompt_tokens: 4 }),
    record({ model: 'model-b', user: member.userId, completion_tokens: 9 }),
    // Neither a token nor a grant (a record as an older version could leave it).
    record({ model: 'model-b', completion_tokens: 1 }),
  ].map((usage, i) => ({
    requestId: `req_rollup_${++n}_${i}`,
    actualCredits: 3 + i,
    description: 'x',
    usage,
  }));
  for (const s of inputs)
    await reserveCredits(suite.server.deps.db, {
      orgKey: suite.owner.orgKey,
      userId: s.usage.user,
      requestId: s.requestId,
      minCredits: 1,
      maxCredits: 50,
    });
  const results = await settleMany(suite.server.deps.db, inputs);
  expect(results.every((r) => !(r instanceof Error))).toBe(true);
  // A retry of the first: the first result stands, nothing is recorded or rolled up twice.
  await settleCredits(suite.server.deps.db, inputs[0]!);
}

/** Moves every record and rollup row of the client back by whole hours (so calls spread over time). */
async function shiftBack(hours: number) {
  const db = suite.server.deps.db;
  const org = suite.owner.orgKey;
  await db.execute(
    sql`update usage_records set created_at = created_at - make_interval(hours => ${hours}) where org_key = ${org}`,
  );
  await db.execute(
    sql`update usage_rollup set hour = hour - make_interval(hours => ${hours}) where org_key = ${org}`,
  );
}

/** The same totals, summed from the raw records (the statement the API ran before the rollup). */
async function fromRecords(from: number, to: number, groupBy: string): Promise<(Totals & { key: string })[]> {
  const key = {
    day: sql`to_char(u.created_at at time zone 'UTC', 'YYYY-MM-DD')`,
    member: sql`u.user_id`,
    credential: sql`case when u.api_token_id is not null then 'token:' || u.api_token_id else 'grant:' || coalesce(u.oauth_grant_id, '') end`,
    model: sql`u.model`,
  }[groupBy]!;
  const rows = await queryRows<Record<string, unknown>>(
    suite.server.deps.db,
    sql`select ${key} as key, count(*) as calls, sum(prompt_tokens) as prompt_tokens,
          sum(completion_tokens) as completion_tokens, sum(cached_prompt_tokens) as cached_prompt_tokens,
          sum(credits_debited) as credits_debited, trim_scale(sum(cost_cents))::text as cost_cents
        from usage_records u
        where u.org_key = ${suite.owner.orgKey} and u.created_at >= to_timestamp(${from}) and u.created_at < to_timestamp(${to})
        group by 1 order by 1`,
  );
  return rows.map((r) => ({
    key: String(r.key),
    calls: Number(r.calls),
    prompt_tokens: Number(r.prompt_tokens),
    completion_tokens: Number(r.completion_tokens),
    cached_prompt_tokens: Number(r.cached_prompt_tokens),
    credits_debited: Number(r.credits_debited),
    cost_cents: String(r.cost_cents),
  }));
}

describe('the usage totals come from the rollup and equal the records', () => {
  it('a period is the rollup hours plus and minus its raw pieces, exactly [from, to)', () => {
    // Every second of a few hours either side, for ends at many offsets: covered once, nothing else.
    const base = 1_764_547_200; // an hour boundary
    const ends = [0, 1, 59, 1799, 1800, 1801, 3599, 3600, 3601, 5400, 7199, 7200, 9000, 10_799];
    for (const a of ends)
      for (const b of ends) {
        if (a >= b) continue;
        const from = base + a;
        const to = base + b;
        const plan = planPeriod(from, to);
        expect(plan.rollup.from % HOUR).toBe(0);
        expect(plan.rollup.to % HOUR).toBe(0);
        for (const p of plan.raw) expect(p.to - p.from).toBeLessThanOrEqual(HOUR / 2);
        for (let t = base - HOUR; t < base + 4 * HOUR; t += 7) {
          let covered = t >= plan.rollup.from && t < plan.rollup.to ? 1 : 0;
          for (const p of plan.raw) if (t >= p.from && t < p.to) covered += p.sign;
          if (covered !== (t >= from && t < to ? 1 : 0)) expect.fail(`${a}..${b}: ${covered} at ${t - base}`);
        }
      }
  });

  it('after mixed calls spread over hours and days, every grouping of every period equals the records', async () => {
    const { server, owner, key } = suite;
    member = await createUser(server);
    await addMember(server, owner.orgKey, member.userId, 'member');
    const memberKey = (await createApiToken(server, member, owner.orgKey, 'member-ci')).secret;
    const grants = await issueTestGrants(server, owner, { orgKey: owner.orgKey, resources: ['model'] });
    await setOrgBalance(server, owner.orgKey, 1_000_000);
    const start = Math.floor(Date.now() / 1000);

    // Four rounds, each moved back in time before the next: 29, 4, 1 and 0 hours ago.
    for (const shift of [25, 3, 1, 0]) {
      suite.fake.reply = () => ({ content: 'one two three', promptTokens: 7 });
      await chat(key);
      await chat(memberKey);
      await chat(grants.model!, server.v2Url);
      suite.fake.reply = () => ({ content: '', promptTokens: 0 }); // costs nothing: a record, no ledger row
      await chat(memberKey);
      suite.fake.reply = () => ({ content: 'a b', promptTokens: 11 });
      // A burst: the settles of calls that end together go in one statement (src/db/batch.ts).
      await Promise.all([chat(key), chat(key), chat(memberKey), chat(grants.model!, server.v2Url)]);
      await settledHere();
      if (shift > 0) await shiftBack(shift);
    }
    const now = Math.ceil(Date.now() / 1000);
    const periods: [number, number][] = [
      [now - 30 * 86_400, now], // the default
      [now - 40 * HOUR, now + 2 * HOUR], // ends in the future
      [start - 30 * HOUR, now + 1],
      [Math.floor(start / HOUR - 30) * HOUR, Math.floor(start / HOUR) * HOUR], // whole hours
      [start - 29 * HOUR - 1_000, start - 4 * HOUR + 2_500], // ends inside hours, both halves
      [start - 29 * HOUR + 2_000, start - 3 * HOUR + 100],
      [start - 4 * HOUR - 60, start - 4 * HOUR + 60], // both ends in one short stretch
      [start - 2 * HOUR, now + 10], // the last round and the one before, partly
      [start - 10, now + 1],
      [start - 10 * HOUR, start - 5 * HOUR], // nothing
    ];
    let compared = 0;
    for (const [from, to] of periods)
      for (const groupBy of ['day', 'member', 'credential', 'model']) {
        const res = await api().get(`/v1/clients/${owner.clientId}/usage`, {
          token: owner.session,
          query: { from, to, group_by: groupBy },
        });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        const body = readJson(summary, res.body);
        const raw = await fromRecords(from, to, groupBy);
        const what = `${groupBy} ${from - start}..${to - start}`;
        expect(
          body.data.map(({ label: _label, ...r }) => r),
          what,
        ).toEqual(raw);
        const sum = (k: keyof Omit<Totals, 'cost_cents'>) => raw.reduce((s, r) => s + r[k], 0);
        expect(body.totals.calls, what).toBe(sum('calls'));
        expect(body.totals.credits_debited, what).toBe(sum('credits_debited'));
        expect(body.totals.prompt_tokens, what).toBe(sum('prompt_tokens'));
        expect(Number(body.totals.cost_cents), what).toBeCloseTo(
          raw.reduce((s, r) => s + Number(r.cost_cents), 0),
          9,
        );
        compared += raw.length;
      }
    expect(compared).toBeGreaterThan(40);
    // The settles' calls are all there: 4 rounds × (8 over HTTP + 4 settled here).
    const all = await fromRecords(now - 30 * 86_400, now + 1, 'model');
    expect(all.reduce((s, r) => s + r.calls, 0)).toBe(48);

    // Reconciliation checks the rollup against the records: sound now, fully and incrementally.
    expect(await checkInvariants(server.deps.db)).toEqual([]);
    const log = createLogger('silent');
    expect((await reconcile(server.deps.db, log, null, { full: true })).violations).toEqual([]);
    await chat(key);
    const inc = await reconcile(server.deps.db, log, null, { settleWindowSeconds: 0 });
    expect(inc.mode).toBe('incremental');
    expect(inc.violations).toEqual([]);
  });

  it('reconciliation finds a rollup row that no longer sums its records', async () => {
    const { server, owner, key } = suite;
    await chat(key);
    await server.deps.db.execute(
      sql`update usage_rollup set calls = calls + 1
          where org_key = ${owner.orgKey} and hour = (select max(hour) from usage_rollup where org_key = ${owner.orgKey})
            and credential like 'token:%'`,
    );
    const found = (await checkInvariants(server.deps.db)).map((v) => v.check);
    expect(found).toContain('usage rollup differs from its usage records');
    // The incremental check looks at the hours new records fell in: a new call in the same hour.
    await chat(key);
    const since = await checkSinceCheckpoint(server.deps.db, 0);
    expect(since?.violations.map((v) => v.check)).toContain('usage rollup differs from its usage records');
    await server.deps.db.execute(
      sql`update usage_rollup set calls = calls - 1
          where org_key = ${owner.orgKey} and hour = (select max(hour) from usage_rollup where org_key = ${owner.orgKey})
            and credential like 'token:%'`,
    );
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });
});
