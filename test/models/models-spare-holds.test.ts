import { beforeAll, describe, expect, it } from 'vitest';
import { and, eq, isNull } from 'drizzle-orm';
import { type TestServer } from '../helpers/server.js';
import { modelSuite } from '../helpers/model-suite.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { orgAccountRow, setOrgBalance } from '../helpers/billing.js';
import { type FakeUpstream } from '../helpers/fake-upstream.js';
import { client } from '../helpers/http.js';
import { apiTokens, billingHolds } from '../../src/db/schema.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { planHold } from '../../src/models/metering/metered.js';
import {
  createSpareHolds,
  SPARE_HEADROOM,
  SPARE_IDLE_MS,
  SPARE_MARGIN,
  SPARES_MAX_PER_ORG,
  SPARES_PER_ORG,
} from '../../src/models/admission/spare-holds.js';
import { openAiError, readJson } from '../helpers/json.js';
import { eventuallyValue } from '../helpers/eventually.js';

// Holds taken ahead (src/models/admission/spare-holds.ts, docs/models.md): the statement that settles a call also
// takes the org's next call's hold, and that call adopts it. Prices as in models-chat: a call
// debits exactly prompt + 2 × completion tokens.

let server: TestServer;
let fake: FakeUpstream;
let owner: TestUser;
let key: string;

const api = () => client(server.url);
const chat = (token: string, body: Record<string, unknown> = {}) =>
  api().post(
    '/v1/chat/completions',
    { model: 'x', max_tokens: 20, messages: [{ role: 'user', content: 'Say hello' }], ...body },
    { token },
  );
const balance = () => orgBalanceCredits(server.deps.db, owner.orgKey);
/** The org's holds waiting for a call: taken ahead, so they name no user. */
const spares = () =>
  server.deps.db
    .select()
    .from(billingHolds)
    .where(
      and(
        eq(billingHolds.orgKey, owner.orgKey),
        eq(billingHolds.status, 'held'),
        isNull(billingHolds.userId),
      ),
    );

/** The last value read: on a timeout too, since the callers assert it (the failure then shows it). */
const waitFor = <T>(read: () => Promise<T>, done: (v: T) => boolean, ms = 5_000): Promise<T> =>
  eventuallyValue(read, done, ms).catch(read);

/** An `svc_` token of a new member of the owner's org (a user has one live token per org). */
async function memberToken(): Promise<{ id: number; secret: string }> {
  const member = await createUser(server);
  await addMember(server, owner.orgKey, member.userId);
  return createApiToken(server, member, owner.orgKey);
}

/** The longest one-token call whose least cost (the server's own plan) the balance `left` still pays. */
function costingAtMost(left: number) {
  const sized = (words: number) => ({
    max_tokens: 1,
    messages: [{ role: 'user', content: 'w '.repeat(words) }],
  });
  let lo = 1;
  let hi = 20_000;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (planHold(server.deps, sized(mid) as never).minCredits <= left) lo = mid;
    else hi = mid - 1;
  }
  return sized(lo);
}

const suite = modelSuite();
beforeAll(() => void ({ server, fake, owner, key } = suite));

describe('holds taken ahead', () => {
  it("a call's settle takes its org's next hold, which the next call adopts and settles exactly", async () => {
    const before = await balance();
    const first = await chat(key);
    expect(first.status).toBe(200);
    // Taken in the settle's own statement, before the answer left: there already, no waiting.
    const [spare] = await spares();
    expect(spare).toBeDefined();
    // The most the call just made could cost, with headroom, held on the allocation like any hold.
    const callMax = planHold(server.deps, {
      model: 'x',
      max_tokens: 20,
      messages: [{ role: 'user', content: 'Say hello' }],
    }).maxCredits;
    expect(spare!.amount).toBe(Math.ceil(callMax * SPARE_HEADROOM));
    expect((await orgAccountRow(server, owner.orgKey)).held).toBe(spare!.amount);

    const second = await chat(key);
    expect(second.status).toBe(200);
    expect(second.headers.get('x-svc-request-id')).toBe(spare!.requestId);
    const [settled] = await server.deps.db
      .select()
      .from(billingHolds)
      .where(eq(billingHolds.requestId, spare!.requestId));
    expect(settled).toMatchObject({ status: 'settled', debited: 20 });
    // Two calls, 20 tokens each (10 prompt + 2 × 5 completion), and nothing else.
    expect(before - (await balance())).toBe(40);
    await server.deps.models.spares.release(owner.orgKey);
    expect((await orgAccountRow(server, owner.orgKey)).held).toBe(0);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('a revoked token is refused with a spare waiting, and the spare stays unspent', async () => {
    const { id, secret } = await memberToken();
    expect((await chat(secret)).status).toBe(200);
    const [spare] = await waitFor(spares, (rows) => rows.length === 1);
    const before = await balance();
    const upstreamCalls = fake.requests.length;
    await server.deps.db.update(apiTokens).set({ revokedAt: new Date() }).where(eq(apiTokens.id, id));
    const refused = await chat(secret);
    expect(refused.status).toBe(401);
    expect(readJson(openAiError, refused.body).error.code).toBe('invalid_token');
    const [still] = await server.deps.db
      .select()
      .from(billingHolds)
      .where(eq(billingHolds.requestId, spare!.requestId));
    expect(still).toMatchObject({ status: 'held', debited: 0 });
    expect(await balance()).toBe(before);
    expect(fake.requests.length).toBe(upstreamCalls);
  });

  it('a request refused before its handler (a body that is not JSON) puts the spare it claimed back', async () => {
    expect((await chat(key)).status).toBe(200);
    const [spare] = await waitFor(spares, (rows) => rows.length === 1);
    const bad = await api().post('/v1/chat/completions', '{"messages": [', { token: key });
    expect(bad.status).toBe(400);
    const next = await chat(key);
    expect(next.status).toBe(200);
    expect(next.headers.get('x-svc-request-id')).toBe(spare!.requestId);
  });

  it(`a spare unused for SPARE_IDLE_MS (${SPARE_IDLE_MS} ms) goes back to the allocation`, async () => {
    expect((await chat(key)).status).toBe(200);
    const [spare] = await waitFor(spares, (rows) => rows.length === 1);
    expect(spare).toBeDefined();
    const rows = await waitFor(spares, (r) => r.length === 0, SPARE_IDLE_MS * 3);
    expect(rows).toEqual([]);
    const [given] = await server.deps.db
      .select()
      .from(billingHolds)
      .where(eq(billingHolds.requestId, spare!.requestId));
    expect(given!.status).toBe('voided');
    expect((await orgAccountRow(server, owner.orgKey)).held).toBe(0);
  });

  it('a call that needs the tokens of a spare too small for it gets them: no false 402', async () => {
    // The spare is small (a 1-token call); the next call's least cost fits the allocation only with the
    // spare's tokens back. Its prompt is sized here with the server's own cost plan.
    expect((await chat(key, { max_tokens: 1 })).status).toBe(200);
    const [spare] = await waitFor(spares, (rows) => rows.length === 1);
    const left = await balance();
    const body = costingAtMost(left);
    const need = planHold(server.deps, body as never);
    expect(need.minCredits).toBeGreaterThan(left - spare!.amount);
    expect(need.minCredits).toBeLessThanOrEqual(left);
    fake.reply = () => ({ content: 'ok', promptTokens: 1 });

    // Another member's token: its first call takes the one-statement admission, which meets the spare.
    const other = (await memberToken()).secret;
    const big = await chat(other, body);
    expect(big.status).toBe(200);
    const [gone] = await server.deps.db
      .select()
      .from(billingHolds)
      .where(eq(billingHolds.requestId, spare!.requestId));
    expect(gone!.status).toBe('voided');
    expect(await balance()).toBeGreaterThanOrEqual(0);
    await server.deps.models.spares.release(owner.orgKey);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });

  it('the same through the general way (a token whose org has a spare waiting)', async () => {
    expect((await chat(key, { max_tokens: 1 })).status).toBe(200);
    const [spare] = await waitFor(spares, (rows) => rows.length === 1);
    const left = await balance();
    const body = costingAtMost(left);
    expect(planHold(server.deps, body as never).minCredits).toBeGreaterThan(left - spare!.amount);
    fake.reply = () => ({ content: 'ok', promptTokens: 1 });
    const big = await chat(key, body);
    expect(big.status).toBe(200);
    expect(big.headers.get('x-svc-request-id')).not.toBe(spare!.requestId);
    const [gone] = await server.deps.db
      .select()
      .from(billingHolds)
      .where(eq(billingHolds.requestId, spare!.requestId));
    expect(gone!.status).toBe('voided');
  });

  it("the owner's reclaim right after a call takes the whole balance: a spare is not a call in flight", async () => {
    expect((await chat(key)).status).toBe(200);
    await waitFor(spares, (rows) => rows.length === 1);
    const put = await api().put(
      `/v1/owner/orgs/${owner.clientId}/allocation`,
      { target_credits: 0 },
      { token: owner.session },
    );
    expect(put.status).toBe(200);
    expect(await balance()).toBe(0);
    expect((await orgAccountRow(server, owner.orgKey)).held).toBe(0);
  });

  it('no spare is taken for an org whose balance is under SPARE_MARGIN times the call', async () => {
    await setOrgBalance(server, owner.orgKey, 100);
    expect((await chat(key)).status).toBe(200);
    // A spare lands with its call's settle, before the answer: none now means none was taken.
    expect(await spares()).toEqual([]);
  });
});

describe('createSpareHolds alone', () => {
  it('a settle whose answer was lost gives its next hold back, and close waits for a settle in flight', async () => {
    const given: string[] = [];
    const shelf = createSpareHolds({
      giveBack: (requestIds) => {
        given.push(...requestIds);
        return Promise.resolve();
      },
      perOrg: 1,
    });
    const next = shelf.ahead('org_a', 100)!;
    expect(next).toMatchObject({
      orgKey: 'org_a',
      amount: Math.ceil(100 * SPARE_HEADROOM),
      floor: SPARE_MARGIN * Math.ceil(100 * SPARE_HEADROOM),
    });
    expect(shelf.ahead('org_a', 100)).toBeNull(); // one per org here (perOrg: 1)
    const claimed = shelf.claim('org_a'); // waits for the settle in flight
    shelf.landed(next, null);
    expect(await claimed).toBeNull();
    expect(given).toEqual([next.requestId]);

    const second = shelf.ahead('org_a', 100)!;
    let closed = false;
    const closing = shelf.close().then(() => (closed = true));
    // Everything here settles in promise jobs (giveBack resolves at once): a close that did not wait for
    // the settle in flight would have resolved before the next turn of the event loop.
    await new Promise((r) => setImmediate(r));
    expect(closed).toBe(false);
    shelf.landed(second, second.amount);
    await closing;
    expect(given).toEqual([next.requestId, second.requestId]); // landed after close: given back at once
  });

  it(`an org has up to SPARES_PER_ORG (${SPARES_PER_ORG}) spares, each further one under a larger floor, claimed first come first served`, async () => {
    const given: string[] = [];
    const shelf = createSpareHolds({
      giveBack: (requestIds) => {
        given.push(...requestIds);
        return Promise.resolve();
      },
    });
    const amount = Math.ceil(100 * SPARE_HEADROOM);
    const coming = Array.from({ length: SPARES_PER_ORG }, () => shelf.ahead('org_a', 100)!);
    // The k-th spare asks the balance to cover SPARE_MARGIN times k spares (svc_settle_holds checks it).
    expect(coming.map((n) => n.floor)).toEqual(coming.map((_, k) => SPARE_MARGIN * amount * (k + 1)));
    expect(shelf.ahead('org_a', 100)).toBeNull(); // the shelf is full: no settle takes another
    const other = shelf.ahead('org_b', 100); // another org's shelf is its own
    expect(other).not.toBeNull();
    shelf.landed(other!, 0);

    // Four calls claim the four spares still on their way; a fifth finds none unclaimed and gets null at
    // once (it holds its own).
    const claims = [0, 1, 2, 3].map(() => shelf.claim('org_a'));
    expect(claims.every((c) => c !== null)).toBe(true);
    expect(shelf.claim('org_a')).toBeNull();
    // They land in another order than they were asked for; the claims are served in arrival order.
    shelf.landed(coming[2]!, amount);
    shelf.landed(coming[0]!, 0); // not taken (the balance under its floor): its claimant holds its own
    shelf.landed(coming[3]!, amount);
    shelf.landed(coming[1]!, amount);
    expect(await Promise.all(claims.map((c) => c!))).toEqual([
      { requestId: coming[2]!.requestId, amount },
      null,
      { requestId: coming[3]!.requestId, amount },
      { requestId: coming[1]!.requestId, amount },
    ]);
    // A spare put back waits on the shelf for the next claim, up to the shelf's depth.
    shelf.putBack('org_a', { requestId: coming[1]!.requestId, amount });
    expect(await shelf.claim('org_a')).toEqual({ requestId: coming[1]!.requestId, amount });
    expect(given).toEqual([]);
    await shelf.close();
  });

  it(`an org's depth follows its calls: one more per call that found none (up to SPARES_MAX_PER_ORG, ${SPARES_MAX_PER_ORG}), one fewer per spare given back unused`, async () => {
    const given: string[] = [];
    let bothIdle!: () => void;
    const idleGone = new Promise<void>((resolve) => (bothIdle = resolve));
    const shelf = createSpareHolds({
      giveBack: (requestIds) => {
        if (given.push(...requestIds) === 2) bothIdle();
        return Promise.resolve();
      },
      perOrg: 1,
      maxPerOrg: 3,
      idleMs: 50,
    });
    const amount = Math.ceil(100 * SPARE_HEADROOM);
    const a = shelf.ahead('org_a', 100)!;
    expect(shelf.ahead('org_a', 100)).toBeNull(); // depth 1 to start with
    const first = shelf.claim('org_a'); // a, on its way
    // Three calls find none unclaimed and hold their own: the depth grows to 2, then 3, and stops there.
    expect([shelf.claim('org_a'), shelf.claim('org_a'), shelf.claim('org_a')]).toEqual([null, null, null]);
    const b = shelf.ahead('org_a', 100)!;
    const c = shelf.ahead('org_a', 100)!;
    expect([b, c].every((n) => n !== null)).toBe(true);
    expect(c.floor).toBe(SPARE_MARGIN * amount * 3); // the balance guard grows with the depth
    expect(shelf.ahead('org_a', 100)).toBeNull(); // at its most: three on their way
    shelf.landed(a, amount);
    expect(await first).toEqual({ requestId: a.requestId, amount });
    shelf.landed(b, amount);
    shelf.landed(c, amount);
    const d = shelf.ahead('org_a', 100)!; // b and c waiting, d on its way: three again
    expect(d).not.toBeNull();
    expect(shelf.ahead('org_a', 100)).toBeNull();
    // b and c go back unused, and the depth with them: d alone is on its way, and it is the most now.
    await idleGone;
    expect(given.sort()).toEqual([b.requestId, c.requestId].sort());
    expect(shelf.ahead('org_a', 100)).toBeNull();
    shelf.landed(d, amount);
    await shelf.close();
  });

  it('the spares that go back at one moment go in one give-back: all of an org on release, all on close', async () => {
    const given: string[][] = [];
    const shelf = createSpareHolds({
      giveBack: (requestIds) => {
        given.push([...requestIds].sort());
        return Promise.resolve();
      },
    });
    const land = (orgKey: string) => {
      const next = shelf.ahead(orgKey, 100)!;
      shelf.landed(next, next.amount);
      return next.requestId;
    };
    const [a1, a2, b1, b2] = [land('org_a'), land('org_a'), land('org_b'), land('org_b')];
    expect(await shelf.release('org_a')).toBe(true);
    expect(given).toEqual([[a1, a2].sort()]);
    await shelf.close();
    expect(given).toEqual([[a1, a2].sort(), [b1, b2].sort()]);
  });
});
