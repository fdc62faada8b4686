import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import WebSocket from 'ws';
import type { TestServer } from '../helpers/server.js';
import { createApiToken, type TestUser } from '../helpers/fixtures.js';
import { localModelSuite } from '../helpers/model-suite.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { loadAgentCatalog } from '../../src/models/front-ends/agents.js';
import type { ServerFrame } from '../../src/runs/frames.js';
import { parseAs } from '../helpers/json.js';
import { eventuallyValue } from '../helpers/eventually.js';
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// The built-in offline model (no MODEL_UPSTREAM_URL): chat, streaming, tool calls and a whole run work
// on a fresh machine, deterministically, billed like any provider.

let server: TestServer;
let owner: TestUser;
let openai: OpenAI;

const suite = localModelSuite(20_000);
beforeAll(() => void ({ server, owner, openai } = suite));

const TOOLS = [
  {
    type: 'function' as const,
    function: {
      name: 'read_file',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
  {
    type: 'function' as const,
    function: {
      name: 'list_directory',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];

describe('svc-local', () => {
  it('is the catalog model and answers deterministically, billed from its own exact counts', async () => {
    expect((await openai.models.list()).data.map((m) => m.id)).toEqual(['svc-local']);
    const before = await orgBalanceCredits(server.deps.db, owner.orgKey);
    const req = { model: 'gpt-4o', messages: [{ role: 'user' as const, content: 'Hello there' }] };
    const a = await openai.chat.completions.create(req);
    const b = await openai.chat.completions.create(req);
    expect(a.model).toBe('svc-local');
    expect(a.choices[0]!.message.content).toContain('Hello there');
    expect(b.choices[0]!.message.content).toBe(a.choices[0]!.message.content);
    expect(b.usage).toEqual(a.usage);
    const per = a.usage!.prompt_tokens + 2 * a.usage!.completion_tokens;
    expect(before - (await orgBalanceCredits(server.deps.db, owner.orgKey))).toBe(2 * per);
  });

  it('streams the same text, with usage when asked', async () => {
    const req = { model: 'x', messages: [{ role: 'user' as const, content: 'Stream please' }] };
    const json = await openai.chat.completions.create(req);
    const stream = await openai.chat.completions.create({
      ...req,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage;
    let chunks = 0;
    for await (const c of stream) {
      text += c.choices[0]?.delta?.content ?? '';
      if (c.usage) usage = c.usage;
      chunks++;
    }
    expect(text).toBe(json.choices[0]!.message.content);
    expect(usage).toEqual(json.usage);
    expect(chunks).toBeGreaterThan(3);
  });

  it('answers n choices, streamed or not, and bills the completion of each', async () => {
    const req = { model: 'x', n: 3, messages: [{ role: 'user' as const, content: 'Three ways' }] };
    const one = await openai.chat.completions.create({ ...req, n: 1 });
    const before = await orgBalanceCredits(server.deps.db, owner.orgKey);
    const json = await openai.chat.completions.create(req);
    expect(json.choices.map((c) => [c.index, c.message.content])).toEqual(
      [0, 1, 2].map((i) => [i, one.choices[0]!.message.content]),
    );
    expect(json.usage).toMatchObject({
      prompt_tokens: one.usage!.prompt_tokens,
      completion_tokens: 3 * one.usage!.completion_tokens,
    });
    expect(before - (await orgBalanceCredits(server.deps.db, owner.orgKey))).toBe(
      json.usage!.prompt_tokens + 2 * json.usage!.completion_tokens,
    );

    const stream = await openai.chat.completions.create({
      ...req,
      stream: true,
      stream_options: { include_usage: true },
    });
    const texts = ['', '', ''];
    let usage;
    for await (const c of stream) {
      for (const choice of c.choices) texts[choice.index] += choice.delta?.content ?? '';
      if (c.usage) usage = c.usage;
    }
    expect(texts).toEqual([0, 1, 2].map(() => one.choices[0]!.message.content));
    expect(usage).toEqual(json.usage);
  });

  it('honours max_tokens', async () => {
    const r = await openai.chat.completions.create({
      model: 'x',
      max_tokens: 3,
      messages: [{ role: 'user', content: 'Say a long thing please' }],
    });
    expect(r.usage!.completion_tokens).toBe(3);
    expect(r.choices[0]!.finish_reason).toBe('length');
  });

  it('calls the tool that fits the request, with schema-shaped arguments, then answers from the result', async () => {
    const r1 = await openai.chat.completions.create({
      model: 'x',
      tools: TOOLS,
      messages: [{ role: 'user', content: 'Please read notes.txt' }],
    });
    const call = r1.choices[0]!.message.tool_calls![0]!;
    expect(r1.choices[0]!.finish_reason).toBe('tool_calls');
    expect(call.type === 'function' && call.function.name).toBe('read_file');
    expect(call.type === 'function' && JSON.parse(call.function.arguments)).toEqual({ path: 'notes.txt' });
    const r2 = await openai.chat.completions.create({
      model: 'x',
      tools: TOOLS,
      messages: [
        { role: 'user', content: 'Please read notes.txt' },
        r1.choices[0]!.message,
        { role: 'tool', tool_call_id: call.id, content: 'buy milk' },
      ],
    });
    expect(r2.choices[0]!.message.content).toContain('buy milk');
    const r3 = await openai.chat.completions.create({
      model: 'x',
      tools: TOOLS,
      tool_choice: 'none',
      messages: [{ role: 'user', content: 'read notes.txt' }],
    });
    expect(r3.choices[0]!.message.tool_calls).toBeUndefined();
  });

  it('runs the default agent over the WebSocket: a tool call, then the answer', async () => {
    const { secret } = await createApiToken(server, owner, owner.orgKey, 'ws');
    const ws = new WebSocket(`${server.url.replace('http', 'ws')}/v1/runs/ws`);
    const frames: ServerFrame[] = [];
    ws.on('message', (d) => {
      const f = parseAs<ServerFrame>((d as Buffer).toString());
      frames.push(f);
      if (f.type === 'authenticated')
        ws.send(
          JSON.stringify({
            type: 'start',
            agent: 'default',
            messages: [{ role: 'user', content: 'list the files here' }],
          }),
        );
      if (f.type === 'tool_call')
        ws.send(
          JSON.stringify({
            type: 'tool_result',
            tool_call_id: f.tool_call_id,
            status: 'ok',
            result: 'a.txt b.txt',
          }),
        );
    });
    await new Promise((r) => ws.once('open', r));
    ws.send(JSON.stringify({ type: 'auth', token: secret }));
    const ending = () => frames.find((x) => x.type === 'run_completed' || x.type === 'error');
    const done = (await eventuallyValue(ending, (f) => f !== undefined, 5_000, 'the run ended').catch(
      (err: Error) => {
        throw new Error(`${err.message}; frames: ${JSON.stringify(frames)}`);
      },
    ))!;
    ws.close();
    expect(done.type).toBe('run_completed');
    if (done.type !== 'run_completed') throw new Error(JSON.stringify(done)); // narrows the type
    const call = frames.find((f) => f.type === 'tool_call');
    expect(call).toMatchObject({ name: 'list_directory', arguments: '{"path":"."}' });
    expect(frames.filter((f) => f.type === 'assistant_message').at(-1)!.message.content).toContain(
      'a.txt b.txt',
    );
    expect(done.steps).toBe(2);
    expect(done.credits_debited).toBe(done.usage.prompt_tokens + 2 * done.usage.completion_tokens);
  });
});

describe('AGENTS_FILE', () => {
  it('loads a valid catalog and rejects a bad one with the field named', () => {
    const dir = mkdtempSync(join(tmpdir(), 'agents-'));
    const good = join(dir, 'good.json');
    writeFileSync(good, JSON.stringify([{ name: 'reviewer', description: 'Reviews code', tools: [] }]));
    expect(loadAgentCatalog(good).get('reviewer')?.description).toBe('Reviews code');
    const bad = join(dir, 'bad.json');
    writeFileSync(
      bad,
      JSON.stringify([
        {
          name: 'x',
          description: 'd',
          tools: [{ name: 't', description: 'd', parameters: { type: 'string' } }],
        },
      ]),
    );
    expect(() => loadAgentCatalog(bad)).toThrow(/0\.tools\.0\.parameters/);
    expect(() => loadAgentCatalog(join(dir, 'missing.json'))).toThrow(/AGENTS_FILE/);
  });
});
