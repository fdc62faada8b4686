import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { client } from '../helpers/http.js';
import { detailError, readJson } from '../helpers/json.js';
import type { DevMail } from '../helpers/answers.js';
import { eventually } from '../helpers/eventually.js';
import { signatureValid, startReceiver, type Receiver } from '../helpers/webhook-receiver.js';
import { outboxDrained } from '../helpers/outbox.js';
import { queryRows } from '../../src/db/client.js';
import { createdEndpointAnswer, deliveryAnswer, endpointAnswer } from '../../src/events/schema.js';

// Over real HTTP: the owner sets a low-balance threshold and registers webhook
// endpoints; real model calls (the openai SDK against svc-local) cross the threshold; the receiver on
// loopback (DEV_MODE allows it) gets signed events, retried after its 500s with backoff under one event id.

const RETRY_BASE_MS = 300;
let server: TestServer;
let api: ReturnType<typeof client>;
let receiver: Receiver;

beforeAll(async () => {
  server = await startTestServer({
    env: {
      WEBHOOK_RETRY_BASE_MS: String(RETRY_BASE_MS),
      // Priced so that one short call costs a few hundred tokens.
      MODEL_PRICE_INPUT: '300000',
      MODEL_PRICE_OUTPUT: '1500000',
    },
  });
  api = client(server.url);
  receiver = await startReceiver();
});
afterAll(async () => {
  await receiver?.close();
  await server?.close();
});

const endpointsPath = (u: TestUser) => `/v1/clients/${u.clientId}/webhook-endpoints`;

async function createEndpoint(u: TestUser, url: string, events: string[]) {
  const res = await api.post(endpointsPath(u), { url, events }, { token: u.session });
  expect(res.status).toBe(200);
  return readJson(createdEndpointAnswer, res.body);
}

async function chat(u: TestUser, token: string) {
  const sdk = new OpenAI({ apiKey: token, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 10_000 });
  await sdk.chat.completions.create({
    model: 'svc-local',
    messages: [{ role: 'user', content: 'Say hello' }],
    max_tokens: 8,
  });
}

const eventBody = z.object({
  id: z.string().regex(/^evt_/),
  object: z.literal('event'),
  type: z.string(),
  created: z.number().int(),
  client_id: z.string(),
  data: z.record(z.string(), z.unknown()),
});
const bodies = (r: Receiver, type?: string) =>
  r.received.map((d) => readJson(eventBody, JSON.parse(d.body))).filter((b) => !type || b.type === type);

async function mails(u: TestUser) {
  const res = await api.get<{ data: DevMail[] }>('/dev/mail', { query: { to: u.email } });
  return res.body.data.filter((m) => /tokens/.test(m.subject));
}

const crossingsOf = (orgKey: string) =>
  queryRows<{ purpose: string }>(
    server.deps.db,
    sql`select purpose from balance_crossings where org_key = ${orgKey} order by id`,
  );

describe('low-balance alerts and outbound events', () => {
  it('mails the owner and delivers signed balance.low and balance.exhausted events, once per crossing', async () => {
    const u = await createUser(server);
    const { secret: token } = await createApiToken(server, u, u.orgKey);
    const endpoint = await createEndpoint(u, receiver.url, ['balance.low', 'balance.exhausted']);
    expect(endpoint.secret).toMatch(/^whsec_/);
    const set = await api.put(
      `/v1/clients/${u.clientId}/balance-alert`,
      { threshold_credits: 5_000 },
      { token: u.session },
    );
    expect(set.body).toEqual({ client_id: u.clientId, threshold_credits: 5_000 });

    await setOrgBalance(server, u.orgKey, 5_000);
    await chat(u, token); // 5,000 → below: balance.low
    await chat(u, token); // below already: nothing
    await eventually(() => bodies(receiver).filter((b) => b.client_id === u.clientId).length >= 1);
    const set0 = await api.put(
      `/v1/owner/orgs/${u.clientId}/allocation`,
      { target_credits: 0 },
      { token: u.session },
    );
    expect(set0.status).toBe(200);
    await eventually(() => bodies(receiver).filter((b) => b.client_id === u.clientId).length >= 2);
    // Nothing more comes: every crossing handled and every delivery answered, so any duplicate is here.
    await eventually(() => outboxDrained(server.deps.db, u.orgKey), 15_000, 'the outbox drained');

    const mine = receiver.received.filter(
      (d) => readJson(eventBody, JSON.parse(d.body)).client_id === u.clientId,
    );
    expect(mine.map((d) => readJson(eventBody, JSON.parse(d.body)).type)).toEqual([
      'balance.low',
      'balance.exhausted',
    ]);
    for (const d of mine) {
      expect(signatureValid(endpoint.secret, d.headers['svc-signature'], d.body)).toBe(true);
      expect(signatureValid('whsec_wrong', d.headers['svc-signature'], d.body)).toBe(false);
      expect(d.headers['svc-event-id']).toBe(readJson(eventBody, JSON.parse(d.body)).id);
      expect(d.headers['content-type']).toBe('application/json');
    }
    const [low, exhausted] = mine.map((d) => readJson(eventBody, JSON.parse(d.body)));
    expect(low!.data).toMatchObject({ threshold_credits: 5_000 });
    expect(low!.data.balance_credits).toBeLessThan(5_000);
    expect(exhausted!.data).toMatchObject({ balance_credits: 0 });

    // Each mail goes out once its crossing's transaction committed (after the event).
    await eventually(async () => (await mails(u)).length >= 2, 15_000, 'both alert mails');
    const sent = await mails(u);
    expect(sent.map((m) => m.subject).sort()).toEqual([
      expect.stringMatching(/below 5,000 tokens/),
      expect.stringMatching(/out of tokens, calls now fail with 402/),
    ]);
    expect(sent[0]!.text).toContain(`/account/clients/${u.clientId}/billing`);
  });

  it('alerts again after a top-up lifted the balance back to the threshold, not before', async () => {
    const u = await createUser(server);
    const { secret: token } = await createApiToken(server, u, u.orgKey);
    await api.put(
      `/v1/clients/${u.clientId}/balance-alert`,
      { threshold_credits: 5_000 },
      { token: u.session },
    );
    await setOrgBalance(server, u.orgKey, 5_000);
    await chat(u, token);
    await setOrgBalance(server, u.orgKey, 4_900); // raised a little, still below: not re-armed
    await chat(u, token);
    expect((await crossingsOf(u.orgKey)).map((c) => c.purpose)).toEqual(['alert.low']);
    await setOrgBalance(server, u.orgKey, 20_000); // a top-up above it: armed again
    await chat(u, token);
    await setOrgBalance(server, u.orgKey, 5_000);
    await chat(u, token);
    expect((await crossingsOf(u.orgKey)).map((c) => c.purpose)).toEqual(['alert.low', 'alert.low']);
    await eventually(async () => (await mails(u)).length === 2);
    // Off: nothing more.
    await api.put(
      `/v1/clients/${u.clientId}/balance-alert`,
      { threshold_credits: null },
      { token: u.session },
    );
    await setOrgBalance(server, u.orgKey, 20_000);
    await setOrgBalance(server, u.orgKey, 0);
    expect(await crossingsOf(u.orgKey)).toHaveLength(2);
  });

  it('retries a delivery the receiver answered 500, with growing waits, under one event id', async () => {
    const flaky = await startReceiver();
    flaky.status = (n) => (n < 2 ? 500 : 204);
    try {
      const u = await createUser(server);
      const endpoint = await createEndpoint(u, flaky.url, ['balance.low']);
      await api.put(
        `/v1/clients/${u.clientId}/balance-alert`,
        { threshold_credits: 100 },
        { token: u.session },
      );
      await setOrgBalance(server, u.orgKey, 100);
      await setOrgBalance(server, u.orgKey, 50);
      await eventually(() => flaky.received.length >= 3, 20_000);
      const ids = flaky.received.map((d) => readJson(eventBody, JSON.parse(d.body)).id);
      expect(new Set(ids).size).toBe(1);
      expect(new Set(flaky.received.map((d) => d.body)).size).toBe(1);
      for (const d of flaky.received)
        expect(signatureValid(endpoint.secret, d.headers['svc-signature'], d.body)).toBe(true);
      const [a, b, c] = flaky.received.map((d) => d.at);
      // The first retry waits at least the base, the second at least 3× the base (docs/billing.md).
      expect(b! - a!).toBeGreaterThanOrEqual(RETRY_BASE_MS - 50);
      expect(c! - b!).toBeGreaterThanOrEqual(3 * RETRY_BASE_MS - 50);
      await eventually(async () => {
        const log = await api.get(`${endpointsPath(u)}/${endpoint.id}/deliveries`, { token: u.session });
        const [row] = readJson(z.object({ data: z.array(deliveryAnswer) }), log.body).data;
        return row?.status === 'delivered';
      });
      const log = await api.get(`${endpointsPath(u)}/${endpoint.id}/deliveries`, { token: u.session });
      expect(readJson(z.object({ data: z.array(deliveryAnswer) }), log.body).data).toEqual([
        expect.objectContaining({
          event_id: ids[0],
          event_type: 'balance.low',
          status: 'delivered',
          attempts: 3,
          last_status_code: 204,
          last_error: null,
          next_attempt_at: null,
        }),
      ]);
      // Nothing more for that event: a later one (re-armed above the threshold, then below again) is
      // delivered by a later pass of the worker, and the outbox drains, with still three of the first.
      await setOrgBalance(server, u.orgKey, 200);
      await setOrgBalance(server, u.orgKey, 50);
      await eventually(() => flaky.received.length >= 4, 20_000, 'the later event delivered');
      await eventually(() => outboxDrained(server.deps.db, u.orgKey), 20_000, 'the outbox drained');
      const later = flaky.received.map((d) => readJson(eventBody, JSON.parse(d.body)).id);
      expect(later.filter((id) => id === ids[0])).toHaveLength(3);
      expect(later).toHaveLength(4);
    } finally {
      await flaky.close();
    }
  });

  it("lets only the owner manage endpoints; another client's endpoint answers like a missing one", async () => {
    const owner = await createUser(server);
    const other = await createUser(server);
    const member = await createUser(server);
    await addMember(server, owner.orgKey, member.userId, 'member');
    const endpoint = await createEndpoint(owner, 'https://hooks.example/svc', ['topup.succeeded']);

    const listed = await api.get(endpointsPath(owner), { token: owner.session });
    expect(readJson(z.object({ data: z.array(endpointAnswer) }), listed.body).data).toEqual([
      {
        id: endpoint.id,
        client_id: owner.clientId,
        url: 'https://hooks.example/svc',
        events: ['topup.succeeded'],
        created_at: endpoint.created_at,
      },
    ]);
    expect(JSON.stringify(listed.body)).not.toContain(endpoint.secret);
    // The secret is kept sealed, not as given.
    const [row] = await queryRows<{ secret_sealed: string }>(
      server.deps.db,
      sql`select secret_sealed from webhook_endpoints where id = ${endpoint.id}`,
    );
    expect(row!.secret_sealed).not.toContain(endpoint.secret.slice(6));

    // A member, and anyone else, is 403 on the client's endpoints (as on every billing setting).
    for (const who of [member, other]) {
      const res = await api.get(endpointsPath(owner), { token: who.session });
      expect(res.status).toBe(403);
      expect(readJson(detailError, res.body).detail.code).toBe('NO_ACCESS');
    }
    // Through its own client, another owner finds no such endpoint: 404, as for an id that never existed.
    for (const id of [endpoint.id, 'we_doesnotexist']) {
      for (const res of [
        await api.delete(`${endpointsPath(other)}/${id}`, { token: other.session }),
        await api.get(`${endpointsPath(other)}/${id}/deliveries`, { token: other.session }),
      ]) {
        expect(res.status).toBe(404);
        expect(readJson(detailError, res.body).detail.code).toBe('NOT_FOUND');
      }
    }
    const bad = await api.post(
      endpointsPath(owner),
      { url: 'https://x.example/', events: ['nope'] },
      { token: owner.session },
    );
    expect(bad.status).toBe(400);
    expect(readJson(detailError, bad.body).detail.code).toBe('VALIDATION_ERROR');
    const creds = await api.post(
      endpointsPath(owner),
      { url: 'https://user:pw@x.example/', events: ['balance.low'] },
      { token: owner.session },
    );
    expect(creds.status).toBe(400);

    const deleted = await api.delete(`${endpointsPath(owner)}/${endpoint.id}`, { token: owner.session });
    expect(deleted.body).toEqual({ deleted: true });
    expect((await api.get(endpointsPath(owner), { token: owner.session })).body).toEqual({ data: [] });
  });

  it('tells endpoints of a paid top-up (topup.succeeded), once', async () => {
    const u = await createUser(server);
    await createEndpoint(u, receiver.url, ['topup.succeeded']);
    const topup = await api.post(
      `/v1/clients/${u.clientId}/credits/topup`,
      { amount_usd: 500, success_url: 'https://app.example/ok', cancel_url: 'https://app.example/no' },
      { token: u.session },
    );
    expect(topup.status).toBe(200);
    const checkoutUrl = String((topup.body as { checkout_url: string }).checkout_url);
    const page = await fetch(checkoutUrl);
    const html = await page.text();
    const cookie = page.headers
      .getSetCookie()
      .map((c) => c.split(';')[0])
      .join('; ');
    const csrf = /name="csrf_token" value="([^"]+)"/.exec(html)![1]!;
    const action = new URL(/<form method="post" action="([^"]+)"/.exec(html)![1]!, checkoutUrl);
    const paid = await fetch(action, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', cookie, origin: action.origin },
      body: new URLSearchParams({ csrf_token: csrf, decision: 'pay' }).toString(),
      redirect: 'manual',
    });
    expect(paid.status).toBe(303);
    await eventually(() => bodies(receiver, 'topup.succeeded').some((b) => b.client_id === u.clientId));
    const mine = bodies(receiver, 'topup.succeeded').filter((b) => b.client_id === u.clientId);
    expect(mine).toHaveLength(1);
    expect(mine[0]!.data).toEqual({ amount_usd: 500, credits_granted: 5_000 });
  });
});
