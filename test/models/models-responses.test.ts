import { describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';
import { weatherRoundTrip } from '../helpers/weather-round-trip.js';
import { modelSuite, type ModelSuite } from '../helpers/model-suite.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { queryRows } from '../../src/db/client.js';
import { addMember, createApiToken, createUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { jsonAs, matching, type OpenAiError } from '../helpers/json.js';

// POST /v1/responses: the OpenAI Responses API as a front-end of the one model call,
// served by translation to chat completions. Clients: the `openai` SDK's responses.create (JSON, stream,
// a tool round trip, previous_response_id, stored responses per organization) and the AI SDK's default
// provider `openai(model)`, which speaks Responses. Money is proved by the ledger: the fake provider's
// prices make a call cost exactly prompt + 2 × completion tokens (FakeUpstream.env).

const s: ModelSuite = modelSuite();
const sdk = (key = s.key) =>
  new OpenAI({ apiKey: key, baseURL: `${s.server.url}/v1`, maxRetries: 0, timeout: 10_000 });
const balance = () => orgBalanceCredits(s.server.deps.db, s.owner.orgKey);

/** The `usage` ledger row of a call, by its request id. */
async function ledgerDebit(requestId: string | null): Promise<number> {
  const rows = await queryRows<{ amount: unknown }>(
    s.server.deps.db,
    sql`select amount from billing_entries where key = ${`usage:${requestId}`}`,
  );
  expect(rows).toHaveLength(1);
  return Math.abs(Number(rows[0]!.amount));
}

const words = (text: string) => text.split(/\s+/).filter(Boolean).length;
const lastRequest = () => s.fake.requests.at(-1)!.body;

describe('POST /v1/responses with the openai SDK', () => {
  it('answers JSON, with instructions as the system message, billed exactly', async () => {
    s.fake.reply = () => ({ content: 'Paris is the capital', promptTokens: 12 });
    const before = await balance();
    const { data, response } = await sdk()
      .responses.create({ model: 'gpt-4o-mini', instructions: 'Be brief.', input: 'Capital of France?' })
      .withResponse();
    expect(data.object).toBe('response');
    expect(data.status).toBe('completed');
    expect(data.output_text).toBe('Paris is the capital');
    expect(data.id).toMatch(/^resp_/);
    expect(data.usage).toMatchObject({ input_tokens: 12, output_tokens: 4, total_tokens: 16 });
    // The provider got a chat request: the model forced, instructions first.
    expect(lastRequest().messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Capital of France?' },
    ]);
    const want = 12 + 2 * 4;
    expect(before - (await balance())).toBe(want);
    expect(await ledgerDebit(response.headers.get('x-svc-request-id'))).toBe(want);
    expect(response.headers.get('x-svc-outcome')).toMatch(/^ey/);
  });

  it('streams the Responses events, the text in deltas, usage in response.completed', async () => {
    s.fake.reply = () => ({ content: 'one two three four five' });
    const before = await balance();
    const { data: stream, response } = await sdk()
      .responses.create({ model: 'x', input: [{ role: 'user', content: 'count' }], stream: true })
      .withResponse();
    const types: string[] = [];
    let text = '';
    let completed: OpenAI.Responses.Response | null = null;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') completed = event.response;
    }
    expect(types[0]).toBe('response.created');
    expect(types).toContain('response.output_item.added');
    expect(types.at(-1)).toBe('response.completed');
    expect(text).toBe('one two three four five');
    expect(completed!.usage).toMatchObject({ input_tokens: 10, output_tokens: 5 });
    expect(completed!.output[0]).toMatchObject({ type: 'message', status: 'completed' });
    const want = 10 + 2 * 5;
    expect(before - (await balance())).toBe(want);
    expect(await ledgerDebit(response.headers.get('x-svc-request-id'))).toBe(want);
  });

  it('makes a tool round trip: a function_call out, its function_call_output back (JSON and stream)', async () => {
    s.fake.reply = (body) =>
      body.messages.some((m) => m.role === 'tool')
        ? { content: 'It is sunny in Paris' }
        : { toolCalls: [{ name: 'get_weather', arguments: '{"city":"Paris"}' }] };
    const parameters = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
    const tools: OpenAI.Responses.Tool[] = [
      {
        type: 'function',
        name: 'get_weather',
        description: 'The weather in a city',
        parameters,
        strict: true,
      },
    ];
    for (const streamed of [false, true]) {
      const before = await balance();
      const input: OpenAI.Responses.ResponseInput = [{ role: 'user', content: 'Weather in Paris?' }];
      let first: OpenAI.Responses.Response;
      let argsStreamed = '';
      if (streamed) {
        const stream = await sdk().responses.create({ model: 'x', input, tools, stream: true });
        first = null as unknown as OpenAI.Responses.Response;
        for await (const event of stream) {
          if (event.type === 'response.function_call_arguments.delta') argsStreamed += event.delta;
          if (event.type === 'response.completed') first = event.response;
        }
        expect(argsStreamed).toBe('{"city":"Paris"}');
      } else first = await sdk().responses.create({ model: 'x', input, tools, tool_choice: 'auto' });
      const call = first.output.find((o) => o.type === 'function_call');
      expect(call).toMatchObject({ name: 'get_weather', arguments: '{"city":"Paris"}' });
      expect(lastRequest().tools).toEqual([
        {
          type: 'function',
          function: {
            name: 'get_weather',
            description: 'The weather in a city',
            parameters,
            strict: true,
          },
        },
      ]);
      if (call?.type !== 'function_call') throw new Error('no function call');
      const second = await sdk().responses.create({
        model: 'x',
        tools,
        store: false,
        input: [
          ...input,
          call,
          { type: 'function_call_output', call_id: call.call_id, output: '22°C, sunny' },
        ],
      });
      expect(second.output_text).toBe('It is sunny in Paris');
      expect(lastRequest().messages).toEqual([
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: call.call_id,
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: call.call_id, content: '22°C, sunny' },
      ]);
      // The fake provider bills 5 completion tokens a tool call, one a word; 10 prompt tokens each call.
      const want = 10 + 2 * 5 + (10 + 2 * words('It is sunny in Paris'));
      expect(before - (await balance())).toBe(want);
    }
  });

  it('continues a stored response with previous_response_id; GET and DELETE it, within its organization only', async () => {
    s.fake.reply = (body) => ({ content: `reply ${body.messages.length}` });
    const first = await sdk().responses.create({
      model: 'x',
      instructions: 'Be kind.',
      input: 'My name is Ada.',
    });
    const second = await sdk().responses.create({
      model: 'x',
      previous_response_id: first.id,
      input: 'What is my name?',
    });
    // The stored conversation, then the new input; the first call's instructions are not carried over.
    expect(lastRequest().messages).toEqual([
      { role: 'user', content: 'My name is Ada.' },
      { role: 'assistant', content: 'reply 2' },
      { role: 'user', content: 'What is my name?' },
    ]);
    expect(second.previous_response_id).toBe(first.id);
    const got = await sdk().responses.retrieve(first.id);
    expect(got).toMatchObject({ id: first.id, output_text: 'reply 2', status: 'completed' });

    // Another organization: not found, on every way (GET, previous_response_id, DELETE); nothing billed.
    const other = await createUser(s.server);
    await setOrgBalance(s.server, other.orgKey, 10_000);
    const otherKey = (await createApiToken(s.server, other, other.orgKey)).secret;
    const notFound = await sdk(otherKey)
      .responses.retrieve(first.id)
      .catch((e: unknown) => e);
    expect(notFound).toBeInstanceOf(OpenAI.NotFoundError);
    const cont = await sdk(otherKey)
      .responses.create({ model: 'x', previous_response_id: first.id, input: 'name?' })
      .catch((e: unknown) => e);
    expect(cont).toBeInstanceOf(OpenAI.BadRequestError);
    expect(cont).toMatchObject({ status: 400, code: 'previous_response_not_found' });
    expect(await orgBalanceCredits(s.server.deps.db, other.orgKey)).toBe(10_000);
    expect(
      await sdk(otherKey)
        .responses.delete(first.id)
        .catch((e: unknown) => e),
    ).toBeInstanceOf(OpenAI.NotFoundError);

    await sdk().responses.delete(first.id);
    expect(
      await sdk()
        .responses.retrieve(first.id)
        .catch((e: unknown) => e),
    ).toBeInstanceOf(OpenAI.NotFoundError);
    // store: false keeps nothing.
    const unstored = await sdk().responses.create({ model: 'x', input: 'hi', store: false });
    expect(
      await sdk()
        .responses.retrieve(unstored.id)
        .catch((e: unknown) => e),
    ).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('a viewer reads a stored response but may not delete it (403 NO_ACCESS); a member may', async () => {
    s.fake.reply = () => ({ content: 'kept' });
    const stored = await sdk().responses.create({ model: 'x', input: 'keep this' });
    const viewer = await createUser(s.server);
    await addMember(s.server, s.owner.orgKey, viewer.userId, 'viewer');
    const viewerKey = (await createApiToken(s.server, viewer, s.owner.orgKey)).secret;
    expect(await sdk(viewerKey).responses.retrieve(stored.id)).toMatchObject({ id: stored.id });
    const refused = await fetch(`${s.server.url}/v1/responses/${stored.id}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${viewerKey}` },
    });
    expect(refused.status).toBe(403);
    expect((await jsonAs<OpenAiError>(refused)).error).toMatchObject({ code: 'NO_ACCESS' });
    // Still there for everyone; a member who can spend deletes it.
    expect(await sdk(viewerKey).responses.retrieve(stored.id)).toMatchObject({ id: stored.id });
    const member = await createUser(s.server);
    await addMember(s.server, s.owner.orgKey, member.userId, 'member');
    const memberKey = (await createApiToken(s.server, member, s.owner.orgKey)).secret;
    await sdk(memberKey).responses.delete(stored.id);
    expect(
      await sdk()
        .responses.retrieve(stored.id)
        .catch((e: unknown) => e),
    ).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it('refuses parameters off the allow-list (400 unsupported_parameter, param), nothing sent or billed', async () => {
    const before = await balance();
    const sent = s.fake.requests.length;
    for (const [param, value] of [
      ['service_tier', 'priority'],
      ['background', true],
      ['include', ['reasoning.encrypted_content']],
    ] as const) {
      const res = await fetch(`${s.server.url}/v1/responses`, {
        method: 'POST',
        headers: { authorization: `Bearer ${s.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'x', input: 'hi', [param]: value }),
      });
      expect(res.status).toBe(400);
      expect((await jsonAs<OpenAiError>(res)).error).toMatchObject({ code: 'unsupported_parameter', param });
    }
    // A built-in tool costs per use at the provider: refused as a tool type.
    const web = await sdk()
      .responses.create({ model: 'x', input: 'hi', tools: [{ type: 'web_search' }] })
      .catch((e: unknown) => e);
    expect(web).toBeInstanceOf(OpenAI.BadRequestError);
    expect(s.fake.requests.length).toBe(sent);
    expect(await balance()).toBe(before);
  });

  it('answers 402 insufficient_credits and 401 in the OpenAI shape; unknown model paths too', async () => {
    await setOrgBalance(s.server, s.owner.orgKey, 0);
    const poor = await sdk()
      .responses.create({ model: 'x', input: 'hi' })
      .catch((e: unknown) => e);
    expect(poor).toBeInstanceOf(OpenAI.APIError);
    expect(poor).toMatchObject({ status: 402, code: 'insufficient_credits' });
    const bad = await sdk('svc_not_a_token')
      .responses.create({ model: 'x', input: 'hi' })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.AuthenticationError);
    for (const path of ['/v1/responses/resp_x/input_items', '/v1/embeddings']) {
      const res = await fetch(`${s.server.url}${path}`, { headers: { authorization: `Bearer ${s.key}` } });
      expect(res.status).toBe(404);
      expect((await jsonAs<OpenAiError>(res)).error).toMatchObject({ type: 'not_found_error' });
    }
  });
});

describe('the AI SDK default provider openai(model), which speaks the Responses API', () => {
  const provider = () => createOpenAI({ apiKey: s.key, baseURL: `${s.server.url}/v1` });

  it('generateText and streamText, billed exactly', async () => {
    s.fake.reply = () => ({ content: 'Hello from the fake upstream' });
    const before = await balance();
    const r = await generateText({ model: provider()('gpt-4o-mini'), prompt: 'hi', maxRetries: 0 });
    expect(r.text).toBe('Hello from the fake upstream');
    expect(r.usage).toMatchObject({ inputTokens: 10, outputTokens: 5 });
    const streamed = streamText({ model: provider()('gpt-4o-mini'), prompt: 'hi', maxRetries: 0 });
    let text = '';
    for await (const piece of streamed.textStream) text += piece;
    expect(text).toBe('Hello from the fake upstream');
    expect(await streamed.usage).toMatchObject({ inputTokens: 10, outputTokens: 5 });
    expect(before - (await balance())).toBe(2 * (10 + 2 * 5));
  });

  it('runs a tool round trip across two steps (item references to the stored response)', async () => {
    s.fake.reply = (body) =>
      body.messages.some((m) => m.role === 'tool')
        ? { content: 'It is sunny' }
        : { toolCalls: [{ name: 'weather', arguments: '{"city":"Paris"}' }] };
    const r = await weatherRoundTrip(provider()('gpt-4o-mini'));
    expect(r.text).toBe('It is sunny');
    expect(r.steps).toHaveLength(2);
    const sent = lastRequest().messages;
    expect(sent.at(-2)).toMatchObject({ role: 'assistant', tool_calls: [{ function: { name: 'weather' } }] });
    expect(sent.at(-1)).toMatchObject({ role: 'tool', content: matching('sunny in Paris') });
  });
});
