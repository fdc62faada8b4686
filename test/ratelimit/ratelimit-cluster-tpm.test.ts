import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq, sql } from 'drizzle-orm';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { ageDatabaseWindow } from '../helpers/rate-windows.js';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { client } from '../helpers/http.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { eventually } from '../helpers/eventually.js';
import { queryRows } from '../../src/db/client.js';
import { usageRecords } from '../../src/db/schema.js';

// An organization's tpm held across two svc processes on one PostgreSQL database (CONTRACT §11), and what
// a process killed mid-call leaves in the window (docs/limits.md § RPM and TPM).
//
// The provider holds every answer until the test lets it go, so no settle corrects a count while the
// calls are decided: each admitted call counts its hold's most, and exactly floor(tpm / hold) calls fit.
// With each process counting alone, each would admit that many.

const TPM = 1_000;
let fake: FakeUpstream;
let server: TestServer;
let child: ChildSvc;

const ask = (base: string, key: string) =>
  fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }),
  }).then(async (res) => ({
    status: res.status,
    remaining: res.headers.get('x-ratelimit-remaining-tokens'),
    code: res.ok ? null : ((await res.json()) as { error: { code: string } }).error.code,
  }));

describe.skipIf(storageMode() !== 'postgres')('tpm across processes', { timeout: 120_000 }, () => {
  const env = () => fake.env({ ORG_MAX_CONCURRENCY: '400' });
  beforeAll(async () => {
    fake = await startFakeUpstream();
    // This process finds the killed one dead in the second test: 10 s after its last beat, inside that
    // test's wait. Both limits are long enough that a loaded machine fences neither process meanwhile (a
    // fenced process answers 503: src/models/slot/liveness.ts).
    server = await startTestServer({ env: { ...env(), PROCESS_DEAD_AFTER_MS: '10000' } });
    child = await startChildSvc({
      ...env(),
      DATABASE_URL: server.databaseUrl!,
      PROCESS_DEAD_AFTER_MS: '30000',
    });
  }, 120_000);
  afterAll(async () => {
    await child?.kill();
    await server?.close();
    await fake?.close();
  });

  const setTpm = async (owner: TestUser) => {
    const res = await client(server.url).put(
      `/v1/clients/${owner.clientId}/limits`,
      { rpm: null, tpm: TPM },
      { token: owner.session },
    );
    expect(res.status).toBe(200);
  };
  const windowAmounts = async (owner: TestUser) =>
    (
      await queryRows<{ amount: number }>(
        server.deps.db,
        sql`select amount from rate_window_entries where key = ${`tpm:org:${owner.orgKey}`} order by id`,
      )
    ).map((r) => Number(r.amount));
  const usageOf = (owner: TestUser) =>
    server.deps.db.select().from(usageRecords).where(eq(usageRecords.orgKey, owner.orgKey));

  /** Calls through `base` until it answers with the limit's headers (it reads the limits every 5 s). */
  async function untilLimited(base: string, owner: TestUser, key: string) {
    let billed = (await usageOf(owner)).length;
    await eventually(
      async () => {
        const r = await ask(base, key);
        if (r.status === 200) billed++;
        return r.remaining !== null;
      },
      15_000,
      'the process applies the limit',
    );
    await eventually(async () => (await usageOf(owner)).length === billed);
    await queryRows(
      server.deps.db,
      sql`delete from rate_window_entries where key = ${`tpm:org:${owner.orgKey}`}`,
    );
    return billed;
  }

  it(`tpm ${TPM}, 200 parallel calls over two processes: exactly what fits, billed once each`, async () => {
    const owner = await createUser(server);
    const key = (await createApiToken(server, owner, owner.orgKey)).secret;
    await setTpm(owner);
    fake.reset();
    await untilLimited(server.url, owner, key);
    // One call alone on the empty window tells the hold such a call counts.
    const probe = await ask(server.url, key);
    const hold = TPM - Number(probe.remaining);
    expect(hold).toBeGreaterThan(0);
    const warmups = await untilLimited(child.url, owner, key);

    const release = fake.holdAnswers();
    const before = fake.requests.length;
    let answeredSoFar = 0;
    const calls = Array.from({ length: 200 }, (_, i) =>
      ask(i % 2 ? server.url : child.url, key).then((r) => {
        if (r.status !== 200) answeredSoFar++;
        return r;
      }),
    );
    // Every call decided: the admitted ones are counted in the window (and wait for the provider), the
    // others were refused.
    await eventually(
      async () => (await windowAmounts(owner)).length + answeredSoFar === 200,
      60_000,
      'every call admitted or refused',
    );
    const fits = Math.floor(TPM / hold);
    expect(await windowAmounts(owner)).toEqual(Array.from({ length: fits }, () => hold));
    release();
    const results = await Promise.all(calls);
    expect(results.filter((r) => r.status === 200)).toHaveLength(fits);
    const refused = results.filter((r) => r.status === 429);
    expect(refused).toHaveLength(200 - fits);
    for (const r of refused) expect(r.code).toBe('rate_limit_exceeded');
    expect(fake.requests.length - before).toBe(fits);
    // The ledger's view: every admitted call billed once, and the tokens billed in the minute under the tpm.
    await eventually(async () => (await usageOf(owner)).length === warmups + fits);
    const billed = (await usageOf(owner)).slice(warmups);
    const tokens = billed.reduce((sum, u) => sum + u.promptTokens + u.completionTokens, 0);
    expect(tokens).toBeLessThanOrEqual(TPM);
    // The window holds what was billed once the settles corrected it.
    await eventually(async () => (await windowAmounts(owner)).reduce((x, y) => x + y, 0) === tokens);
  });

  it('a process killed mid-call: its call counts once, at its hold, until its minute ends; then nothing is left', async () => {
    const owner = await createUser(server);
    const key = (await createApiToken(server, owner, owner.orgKey)).secret;
    await setTpm(owner);
    fake.reset();
    await untilLimited(server.url, owner, key);
    const warmups = await untilLimited(child.url, owner, key);

    const release = fake.holdAnswers();
    const inFlight = ask(child.url, key).catch(() => null);
    await eventually(async () => fake.requests.length > 0 && (await windowAmounts(owner)).length === 1);
    const [hold] = await windowAmounts(owner);
    await child.kill();
    await inFlight;
    release();
    // Its peer declares it dead (its holds go back to the allocation); the window is not changed by that.
    await eventually(
      async () => (await queryRows(server.deps.db, sql`select 1 from svc_processes`)).length === 1,
      30_000,
      'the killed process declared dead (PROCESS_DEAD_AFTER_MS)',
    );
    expect(await windowAmounts(owner)).toEqual([hold]);
    // The survivor counts it once: its own call's hold on top of the dead one's, no more, no less.
    const next = await ask(server.url, key);
    expect(next.status).toBe(200);
    expect(Number(next.remaining)).toBe(TPM - hold! - hold!);
    await eventually(async () => (await usageOf(owner)).length === warmups + 1);
    const used = (await usageOf(owner)).at(-1)!;
    await eventually(
      async () =>
        (await windowAmounts(owner)).join() === [hold, used.promptTokens + used.completionTokens].join(),
    );
    // Their minute ends (moved 60 s back in the store): they leave the window whole, nothing stays behind.
    await ageDatabaseWindow(server.deps.db, `tpm:org:${owner.orgKey}`, 60_000);
    const after = await ask(server.url, key);
    expect(Number(after.remaining)).toBe(TPM - hold!);
    expect(await windowAmounts(owner)).toHaveLength(1);
  });
});
