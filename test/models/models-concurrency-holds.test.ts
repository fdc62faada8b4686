import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { callChat, orgLedger, waitUntil } from '../helpers/chat-load.js';
import { checkInvariants } from '../../src/billing/invariants.js';

// A call refused 429 `concurrency_limit` writes nothing to the ledger. Before, the lease
// and the hold were taken in parallel, so every 429 wrote a hold and then voided it (a write pair per
// refusal). Now the slot comes first (src/models/slot/lease.ts): with the org at its cap, refused calls on
// every way in (an `svc_` token alone, seen before or not; a token naming its org, the general way)
// leave billing_holds exactly as it was.

let fake: FakeUpstream;
let server: TestServer;
let owner: TestUser;
let key: string;
const CAP = 2;

beforeAll(async () => {
  fake = await startFakeUpstream();
  server = await startTestServer({ env: fake.env({ ORG_MAX_CONCURRENCY: String(CAP) }) });
  owner = await createUser(server);
  key = (await createApiToken(server, owner, owner.orgKey)).secret;
  await setOrgBalance(server, owner.orgKey, 1_000_000);
});

afterAll(async () => {
  await server?.close();
  await fake?.close();
});

const holdRows = async () =>
  Number(
    (
      await queryRows<{ n: unknown }>(
        server.deps.db,
        sql`select count(*) as n from billing_holds where org_key = ${owner.orgKey}`,
      )
    )[0]!.n,
  );

/** A chat call naming its org (x-svc-organisation): the general way (caller read, then lease, then hold). */
async function callNamingOrg(): Promise<{ status: number; code: string | null }> {
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${key}`,
      'content-type': 'application/json',
      'x-svc-organisation': owner.orgId,
    },
    body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
  });
  const body = (await res.json()) as { error?: { code?: string } };
  return { status: res.status, code: body.error?.code ?? null };
}

describe('a call refused 429 concurrency_limit', () => {
  it('writes no hold, on every way in; the calls that ran are billed exactly', async () => {
    // Warm: the token is known to this process (one-statement admission) and a hold is taken ahead.
    expect((await callChat(server.url, key)).status).toBe(200);
    expect((await callChat(server.url, key, { stream: true })).answered).toBe(true);

    const release = fake.holdAnswers(); // the CAP calls below hang at the provider until released
    const abort = new AbortController();
    const hanging = Array.from({ length: CAP }, (_, i) =>
      callChat(server.url, key, { stream: i === 0, signal: abort.signal }),
    );
    await waitUntil(async () => (await orgLedger(server, owner.orgKey)).liveLeases === CAP, 10_000);
    await waitUntil(() => fake.inFlight === CAP, 10_000);
    const rowsBefore = await holdRows();

    // A second member's token, not seen by this process (a second token of the owner's would revoke the first).
    const member = await createUser(server);
    await addMember(server, owner.orgKey, member.userId);
    const fresh = (await createApiToken(server, member, owner.orgKey)).secret;
    const refused = await Promise.all([
      ...Array.from({ length: 12 }, (_, i) => callChat(server.url, key, { stream: i % 2 === 0 })),
      ...Array.from({ length: 4 }, () => callChat(server.url, fresh)),
      ...Array.from({ length: 4 }, () => callNamingOrg()),
    ]);
    expect(refused.map((r) => `${r.status}:${r.code}`)).toEqual(refused.map(() => '429:concurrency_limit'));
    // Not one hold row was written for the 20 refusals (before: 20 written and voided).
    expect(await holdRows()).toBe(rowsBefore);

    abort.abort();
    await Promise.all(hanging);
    release();
    await waitUntil(async () => (await orgLedger(server, owner.orgKey)).liveLeases === 0, 10_000);
    // The cap is back, and the ledger is whole: the provider had every call its callers left, so each is
    // billed once (CONTRACT §9): the JSON ones completed at their usage, the stream its prompt.
    expect((await callChat(server.url, key)).status).toBe(200);
    const ledger = await orgLedger(server, owner.orgKey);
    expect(ledger.usageRows).toBe(3 + CAP);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });
});
