import { describe, expect, it } from 'vitest';
import Anthropic from '@anthropic-ai/sdk';
import { sql } from 'drizzle-orm';
import { modelSuite, type ModelSuite } from '../helpers/model-suite.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { queryRows } from '../../src/db/client.js';
import { setOrgBalance } from '../helpers/billing.js';
import { jsonAs } from '../helpers/json.js';

// POST /v1/messages: the Anthropic Messages API as a front-end of the one model call,
// served by translation to chat completions, tested with the official `@anthropic-ai/sdk` client: JSON,
// stream, a tool round trip, the key in x-api-key or as a bearer, errors in Anthropic's shape. Money is
// proved by the ledger: the fake provider's prices make a call cost exactly prompt + 2 × completion.

const s: ModelSuite = modelSuite();
const client = (key = s.key, bearer = false) =>
  new Anthropic({
    ...(bearer ? { authToken: key, apiKey: null } : { apiKey: key }),
    baseURL: s.server.url,
    maxRetries: 0,
    timeout: 10_000,
  });
const balance = () => orgBalanceCredits(s.server.deps.db, s.owner.orgKey);
const lastRequest = () => s.fake.requests.at(-1)!.body;

async function ledgerDebit(requestId: string | null): Promise<number> {
  const rows = await queryRows<{ amount: unknown }>(
    s.server.deps.db,
    sql`select amount from billing_entries where key = ${`usage:${requestId}`}`,
  );
  expect(rows).toHaveLength(1);
  return Math.abs(Number(rows[0]!.amount));
}

describe('POST /v1/messages with the Anthropic SDK', () => {
  it('answers JSON with x-api-key and with a bearer, system first, billed exactly', async () => {
    s.fake.reply = () => ({ content: 'Paris is the capital', promptTokens: 12 });
    for (const bearer of [false, true]) {
      const before = await balance();
      const { data, response } = await client(s.key, bearer)
        .messages.create({
          model: 'claude-test',
          max_tokens: 100,
          system: 'Be brief.',
          messages: [{ role: 'user', content: 'Capital of France?' }],
        })
        .withResponse();
      expect(data).toMatchObject({
        type: 'message',
        role: 'assistant',
        content: [{ type: 'text', text: 'Paris is the capital' }],
        stop_reason: 'end_turn',
        usage: { input_tokens: 12, output_tokens: 4 },
      });
      expect(lastRequest().messages).toEqual([
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Capital of France?' },
      ]);
      expect(lastRequest().max_tokens).toBe(100);
      const want = 12 + 2 * 4;
      expect(before - (await balance())).toBe(want);
      expect(await ledgerDebit(response.headers.get('x-svc-request-id'))).toBe(want);
      expect(response.headers.get('x-svc-outcome')).toMatch(/^ey/);
    }
  });

  it('streams message_start, content block deltas, message_delta with usage and message_stop', async () => {
    s.fake.reply = () => ({ content: 'one two three four five' });
    const before = await balance();
    const { data: stream, response } = await client()
      .messages.create({
        model: 'x',
        max_tokens: 100,
        stream: true,
        messages: [{ role: 'user', content: 'count' }],
      })
      .withResponse();
    const types: string[] = [];
    let text = '';
    let usage: Anthropic.MessageDeltaUsage | null = null;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
      if (event.type === 'message_delta') usage = event.usage;
    }
    expect(types[0]).toBe('message_start');
    expect(types.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
    expect(text).toBe('one two three four five');
    expect(usage).toMatchObject({ input_tokens: 10, output_tokens: 5 });
    const want = 10 + 2 * 5;
    expect(before - (await balance())).toBe(want);
    expect(await ledgerDebit(response.headers.get('x-svc-request-id'))).toBe(want);

    // The SDK's message stream helper assembles the same message.
    const final = await client()
      .messages.stream({ model: 'x', max_tokens: 100, messages: [{ role: 'user', content: 'count' }] })
      .finalMessage();
    expect(final.content).toEqual([{ type: 'text', text: 'one two three four five' }]);
    expect(final.usage).toMatchObject({ input_tokens: 10, output_tokens: 5 });
  });

  it('makes a tool round trip: tool_use out, tool_result back (JSON and stream)', async () => {
    s.fake.reply = (body) =>
      body.messages.some((m) => m.role === 'tool')
        ? { content: 'It is sunny in Paris' }
        : { toolCalls: [{ name: 'get_weather', arguments: '{"city":"Paris"}' }] };
    const tools: Anthropic.Tool[] = [
      {
        name: 'get_weather',
        description: 'The weather in a city',
        input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    ];
    for (const streamed of [false, true]) {
      const before = await balance();
      const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'Weather in Paris?' }];
      const first = streamed
        ? await client().messages.stream({ model: 'x', max_tokens: 200, tools, messages }).finalMessage()
        : await client().messages.create({
            model: 'x',
            max_tokens: 200,
            tools,
            tool_choice: { type: 'auto' },
            messages,
          });
      expect(first.stop_reason).toBe('tool_use');
      const use = first.content.find((b) => b.type === 'tool_use');
      expect(use).toMatchObject({ name: 'get_weather', input: { city: 'Paris' } });
      if (use?.type !== 'tool_use') throw new Error('no tool_use block');
      const second = await client().messages.create({
        model: 'x',
        max_tokens: 200,
        tools,
        messages: [
          ...messages,
          { role: 'assistant', content: first.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '22°C, sunny' }] },
        ],
      });
      expect(second.content).toEqual([{ type: 'text', text: 'It is sunny in Paris' }]);
      expect(lastRequest().messages).toEqual([
        { role: 'user', content: 'Weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: use.id,
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
            },
          ],
        },
        { role: 'tool', tool_call_id: use.id, content: '22°C, sunny' },
      ]);
      // 10 prompt tokens a call; the fake bills 5 completion tokens a tool call, one a word.
      expect(before - (await balance())).toBe(10 + 2 * 5 + (10 + 2 * 5));
    }
  });

  it('takes what Claude Code sends on every request: system turns, thinking, effort, context management', async () => {
    // The shape of Claude Code 2.1's requests (captured from it): the beta client (`?beta=true` and the
    // anthropic-beta header), system turns inside messages, a deferred tool, and three parameters svc
    // takes without applying (src/models/front-ends/messages/schema.ts). Tried by hand with Claude Code itself too
    // (docs/models.md).
    s.fake.reply = () => ({ content: 'hello from svc', promptTokens: 30 });
    const before = await balance();
    const { data: stream, response } = await client()
      .beta.messages.create({
        model: 'claude-opus-5-5',
        max_tokens: 100,
        stream: true,
        betas: ['claude-code-20250219', 'interleaved-thinking-2025-05-14', 'context-management-2025-06-27'],
        system: [
          { type: 'text', text: 'You are a coding agent.' },
          { type: 'text', text: 'Be careful.', cache_control: { type: 'ephemeral' } },
        ],
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'First.' }] },
          { role: 'system', content: 'Only until the next user turn.', clear_at: 'next_user_message' },
          { role: 'assistant', content: 'ok' },
          {
            role: 'user',
            content: [{ type: 'text', text: 'Say hello.', cache_control: { type: 'ephemeral' } }],
          },
          { role: 'system', content: [{ type: 'text', text: 'Reminder: be brief.' }] },
        ],
        tools: [
          {
            name: 'Bash',
            description: 'Run a command',
            input_schema: { type: 'object', properties: { command: { type: 'string' } } },
            defer_loading: true,
          },
        ],
        metadata: { user_id: JSON.stringify({ device_id: 'd1', account_uuid: '', session_id: 's1' }) },
        thinking: { type: 'adaptive', display: 'omitted' },
        context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
        output_config: { effort: 'medium' },
      })
      .withResponse();
    let text = '';
    for await (const event of stream)
      if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
    expect(text).toBe('hello from svc');
    expect(lastRequest().messages).toEqual([
      { role: 'system', content: 'You are a coding agent.\nBe careful.' },
      { role: 'user', content: 'First.' },
      { role: 'assistant', content: 'ok' },
      { role: 'user', content: 'Say hello.' },
      { role: 'system', content: 'Reminder: be brief.' },
    ]);
    expect(lastRequest()).not.toHaveProperty('reasoning_effort');
    const want = 30 + 2 * 3;
    expect(before - (await balance())).toBe(want);
    expect(await ledgerDebit(response.headers.get('x-svc-request-id'))).toBe(want);
  });

  it('answers 401, 402 and 400 in Anthropic’s error shape; nothing billed', async () => {
    const sent = s.fake.requests.length;
    const bad = await client('svc_not_a_token')
      .messages.create({ model: 'x', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(bad).toMatchObject({
      status: 401,
      error: { type: 'error', error: { type: 'authentication_error' } },
    });

    const unknown = await fetch(`${s.server.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': s.key, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'x',
        max_tokens: 10,
        messages: [{ role: 'user', content: 'hi' }],
        top_k: 5,
      }),
    });
    expect(unknown.status).toBe(400);
    expect(await jsonAs<unknown>(unknown)).toEqual({
      type: 'error',
      error: { type: 'invalid_request_error', message: matchingTopK },
    });
    // Structured output through output_config is not served: refused, not dropped.
    const format = await client()
      .beta.messages.create({
        model: 'x',
        max_tokens: 10,
        messages: [{ role: 'user', content: 'hi' }],
        output_config: { format: { type: 'json_schema', schema: { type: 'object' } } },
      })
      .catch((e: unknown) => e);
    expect(format).toMatchObject({ status: 400, error: { error: { type: 'invalid_request_error' } } });

    await setOrgBalance(s.server, s.owner.orgKey, 0);
    const poor = await client()
      .messages.create({ model: 'x', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(poor).toBeInstanceOf(Anthropic.APIError);
    expect(poor).toMatchObject({ status: 402, error: { type: 'error', error: { type: 'billing_error' } } });
    expect(s.fake.requests.length).toBe(sent);
    expect(await balance()).toBe(0);
  });
});

const matchingTopK: unknown = expect.stringContaining("'top_k'");
