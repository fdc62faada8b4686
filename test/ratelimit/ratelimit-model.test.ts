import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { TEST_PRICES } from '../helpers/fake-upstream.js';
import { detailOf, rejectionOf } from '../helpers/json.js';
import { eventually } from '../helpers/webhook-receiver.js';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';

// RPM and TPM limits per organization and per credential (CONTRACT §11): the routes' shapes and roles,
// 429 rate_limit_exceeded with Retry-After, and the vendors' rate-limit headers as the official SDKs read
// them (OpenAI's x-ratelimit-* on chat completions, Anthropic's anthropic-ratelimit-* on /v1/messages).

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  server = await startTestServer({ env: TEST_PRICES });
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

type ApiError = InstanceType<typeof OpenAI.APIError>;
const openai = (key: string) =>
  new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 10_000 });
const chat = (key: string, maxTokens = 16) =>
  openai(key)
    .chat.completions.create({
      model: 'm',
      max_tokens: maxTokens,
      messages: [{ role: 'user', content: 'hi' }],
    })
    .withResponse();
const limitsPath = (u: TestUser) => `/v1/clients/${u.clientId}/limits`;

describe('the limits routes', () => {
  it('the owner sets, owner and members read, viewers and members cannot set; values are positive or null', async () => {
    const owner = await createUser(server);
    const mate = await createUser(server);
    const viewer = await createUser(server);
    await addMember(server, owner.orgKey, mate.userId, 'member');
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');
    expect((await api.get(limitsPath(owner), { token: owner.session })).body).toEqual({
      client_id: owner.clientId,
      rpm: null,
      tpm: null,
    });
    const put = await api.put(limitsPath(owner), { rpm: 60, tpm: 100_000 }, { token: owner.session });
    expect(put.status).toBe(200);
    expect(put.body).toEqual({ client_id: owner.clientId, rpm: 60, tpm: 100_000 });
    expect((await api.get(limitsPath(owner), { token: mate.session })).body).toEqual(put.body);
    expect(detailOf((await api.get(limitsPath(owner), { token: viewer.session })).body).code).toBe(
      'NO_ACCESS',
    );
    expect((await api.put(limitsPath(owner), { rpm: 1, tpm: null }, { token: mate.session })).status).toBe(
      403,
    );
    for (const body of [
      { rpm: 0, tpm: null },
      { rpm: -1, tpm: null },
      { rpm: 1.5, tpm: null },
      { rpm: 'x', tpm: null },
    ]) {
      const res = await api.put(limitsPath(owner), body, { token: owner.session });
      expect(res.status).toBe(400);
      expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
    }
    const cleared = await api.put(limitsPath(owner), { rpm: null, tpm: null }, { token: owner.session });
    expect(cleared.body).toEqual({ client_id: owner.clientId, rpm: null, tpm: null });

    const key = await createApiToken(server, mate, owner.orgKey);
    const tokenPath = `/v1/clients/${owner.clientId}/tokens/${key.id}/limits`;
    const set = await api.put(tokenPath, { rpm: 5, tpm: null }, { token: owner.session });
    expect(set.body).toEqual({ client_id: owner.clientId, token_id: key.id, rpm: 5, tpm: null });
    expect((await api.get(tokenPath, { token: mate.session })).body).toEqual(set.body);
    expect((await api.put(tokenPath, { rpm: 5, tpm: null }, { token: mate.session })).status).toBe(403);
    expect(
      (await api.get(`/v1/clients/${owner.clientId}/tokens/999999/limits`, { token: owner.session })).status,
    ).toBe(404);
    expect(
      (await api.get(`/v1/clients/${owner.clientId}/tokens/abc/limits`, { token: owner.session })).status,
    ).toBe(404);
  });
});

describe('enforcement and the headers', () => {
  it('no limit: no x-ratelimit headers', async () => {
    const owner = await createUser(server);
    const key = await createApiToken(server, owner, owner.orgKey);
    const { response } = await chat(key.secret);
    expect(response.headers.get('x-ratelimit-limit-requests')).toBeNull();
  });

  it('an organization rpm: headers count down, the call over it is 429 rate_limit_exceeded with Retry-After', async () => {
    const owner = await createUser(server);
    const key = await createApiToken(server, owner, owner.orgKey);
    await api.put(limitsPath(owner), { rpm: 2, tpm: null }, { token: owner.session });
    const first = await chat(key.secret);
    expect(first.response.headers.get('x-ratelimit-limit-requests')).toBe('2');
    expect(first.response.headers.get('x-ratelimit-remaining-requests')).toBe('1');
    expect(first.response.headers.get('x-ratelimit-reset-requests')).toMatch(/^(\d|[1-5]\d)s$|^1m0s$/);
    expect(first.response.headers.get('x-ratelimit-limit-tokens')).toBeNull();
    const second = await chat(key.secret);
    expect(second.response.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    const err = await rejectionOf<ApiError>(chat(key.secret));
    expect(err.status).toBe(429);
    expect(err.code).toBe('rate_limit_exceeded');
    const retryAfter = Number(err.headers?.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(err.headers?.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(err.headers?.get('x-ratelimit-limit-requests')).toBe('2');
  });

  it('a credential tpm: the hold counts at admission and the settle corrects it; a call whose hold exceeds it is refused', async () => {
    const owner = await createUser(server);
    const key = await createApiToken(server, owner, owner.orgKey);
    await api.put(
      `/v1/clients/${owner.clientId}/tokens/${key.id}/limits`,
      { rpm: null, tpm: 2_000 },
      { token: owner.session },
    );
    const ok = await chat(key.secret, 16);
    expect(ok.response.headers.get('x-ratelimit-limit-tokens')).toBe('2000');
    const left = Number(ok.response.headers.get('x-ratelimit-remaining-tokens'));
    expect(left).toBeLessThan(2_000);
    // The settle gives back what the hold counted beyond the call's real use: the next call sees more left
    // than the first hold alone would leave, less the second's own hold.
    const used = ok.data.usage!.total_tokens;
    // The answer goes out before its settle, and the settle corrects the window after: wait for the entry
    // to hold the call's real count.
    const counted = async () =>
      (
        await queryRows<{ amount: number }>(
          server.deps.db,
          sql`select amount from rate_window_entries where key = ${`tpm:token:${key.id}`}`,
        )
      ).map((r) => Number(r.amount));
    await eventually(async () => (await counted()).join() === String(used));
    const next = await chat(key.secret, 16);
    const held = 2_000 - left;
    expect(Number(next.response.headers.get('x-ratelimit-remaining-tokens'))).toBe(2_000 - used - held);
    const usedNext = next.data.usage!.total_tokens;
    await eventually(async () => (await counted()).reduce((a, b) => a + b, 0) === used + usedNext);
    // A call whose hold alone is above the limit can never fit: refused, nothing counted, and the headers
    // show what the window really has left.
    const err = await rejectionOf<ApiError>(chat(key.secret, 4_000));
    expect(err.status).toBe(429);
    expect(err.code).toBe('rate_limit_exceeded');
    expect(err.message).toMatch(/lower max_tokens/);
    expect(err.headers?.get('x-ratelimit-remaining-tokens')).toBe(String(2_000 - used - usedNext));
    expect((await counted()).length).toBe(2);
  });

  it('/v1/messages carries Anthropic’s headers, reset as RFC 3339, read by @anthropic-ai/sdk', async () => {
    const owner = await createUser(server);
    const key = await createApiToken(server, owner, owner.orgKey);
    await api.put(limitsPath(owner), { rpm: 1, tpm: 50_000 }, { token: owner.session });
    const anthropic = new Anthropic({
      apiKey: key.secret,
      baseURL: server.url,
      maxRetries: 0,
      timeout: 10_000,
    });
    const send = () =>
      anthropic.messages
        .create({ model: 'm', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] })
        .withResponse();
    const { response } = await send();
    expect(response.headers.get('anthropic-ratelimit-requests-limit')).toBe('1');
    expect(response.headers.get('anthropic-ratelimit-requests-remaining')).toBe('0');
    const reset = response.headers.get('anthropic-ratelimit-requests-reset')!;
    expect(reset).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    expect(Date.parse(reset) - Date.now()).toBeLessThanOrEqual(61_000);
    expect(response.headers.get('anthropic-ratelimit-tokens-limit')).toBe('50000');
    expect(response.headers.get('x-ratelimit-limit-requests')).toBeNull();
    const err = await rejectionOf<InstanceType<typeof Anthropic.APIError>>(send());
    expect(err.status).toBe(429);
    expect(err.headers?.get('retry-after')).toMatch(/^\d+$/);
    expect(err.headers?.get('anthropic-ratelimit-requests-remaining')).toBe('0');
  });
});
