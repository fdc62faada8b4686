import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { type TestServer } from '../helpers/server.js';
import { modelSuite } from '../helpers/model-suite.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { type FakeUpstream } from '../helpers/fake-upstream.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';

// The parameter allow-list of /v1/chat/completions (CONTRACT §8): a parameter off the
// list is 400 `unsupported_parameter` naming it, as OpenAI answers an unknown argument, and never reaches
// the provider; the `user` the provider sees is svc's own opaque id of the acting user. Driven with the
// openai SDK against the fake provider over HTTP.

let server: TestServer;
let fake: FakeUpstream;
let owner: TestUser;
let key: string;

const sdk = (apiKey: string) =>
  new OpenAI({ apiKey, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 10_000 });
const suite = modelSuite();
beforeAll(() => void ({ server, fake, owner, key } = suite));

const base = { model: 'm', messages: [{ role: 'user' as const, content: 'hi' }] };

describe('request parameters', () => {
  it.each([
    ['service_tier', { service_tier: 'priority' }],
    ['store', { store: true }],
    ['metadata', { metadata: { a: 'b' } }],
    ['audio', { audio: { voice: 'alloy', format: 'mp3' } }],
    ['modalities', { modalities: ['text', 'audio'] }],
    ['web_search_options', { web_search_options: {} }],
    ['prediction', { prediction: { type: 'content', content: 'x' } }],
    ['made_up_knob', { made_up_knob: 1 }],
  ])(
    'refuses %s with 400 unsupported_parameter naming it; the provider never sees it',
    async (param, extra) => {
      const before = await orgBalanceCredits(server.deps.db, owner.orgKey);
      const sent = fake.requests.length;
      for (const stream of [false, true]) {
        const err = await sdk(key)
          .chat.completions.create({ ...base, ...extra, stream } as never)
          .then(
            () => null,
            (e: unknown) => e,
          );
        expect(err).toBeInstanceOf(OpenAI.APIError);
        const apiErr = err as InstanceType<typeof OpenAI.APIError>;
        expect(apiErr.status).toBe(400);
        expect(apiErr.code).toBe('unsupported_parameter');
        expect(apiErr.param).toBe(param);
        expect((apiErr.error as { type?: string }).type).toBe('invalid_request_error');
      }
      expect(fake.requests.length).toBe(sent);
      expect(await orgBalanceCredits(server.deps.db, owner.orgKey)).toBe(before);
    },
  );

  it('asks for the credential before judging parameters (401 without one)', async () => {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ ...base, service_tier: 'priority' }),
    });
    expect(res.status).toBe(401);
  });

  it('passes the allow-listed parameters SDKs send, and sends svc’s opaque user id, never the caller’s', async () => {
    const res = await sdk(key).chat.completions.create({
      ...base,
      temperature: 0.5,
      top_p: 0.9,
      stop: ['\n\n'],
      seed: 7,
      presence_penalty: 0,
      frequency_penalty: 0,
      logit_bias: {},
      logprobs: false,
      response_format: { type: 'text' },
      parallel_tool_calls: true,
      reasoning_effort: 'low',
      store: false,
      modalities: ['text'],
      user: 'alice@example.com',
      safety_identifier: 'caller-chosen',
    } as never);
    expect(res.choices[0]!.message.content).toBeTruthy();
    const body = fake.requests.at(-1)!.body;
    expect(body).toMatchObject({ temperature: 0.5, top_p: 0.9, stop: ['\n\n'], seed: 7, store: false });
    expect(body.user).toMatch(/^svcu_[A-Za-z0-9_-]{22}$/);
    expect(JSON.stringify(body)).not.toContain('alice@example.com');
    expect(JSON.stringify(body)).not.toContain(owner.userId);
    expect(body.safety_identifier).toBeUndefined();
    // Stable per user (abuse reports can be traced back by the operator), different between users,
    // present even when the caller sent none.
    await sdk(key).chat.completions.create({ ...base, stream: false });
    expect(fake.requests.at(-1)!.body.user).toBe(body.user);
    const other = await createUser(server);
    await setOrgBalance(server, other.orgKey, 1_000);
    const otherKey = (await createApiToken(server, other, other.orgKey)).secret;
    await sdk(otherKey).chat.completions.create({ ...base, user: body.user } as never);
    const otherId = fake.requests.at(-1)!.body.user;
    expect(otherId).toMatch(/^svcu_/);
    expect(otherId).not.toBe(body.user);
  });
});
