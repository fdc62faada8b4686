import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import WebSocket from 'ws';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { billedCalls, lastEntryId, waitUntil } from '../helpers/chat-load.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { parseAs, rejectionOf } from '../helpers/json.js';
import type { ServerFrame } from '../../src/runs/frames.js';
import { newId } from '../../src/ids.js';

// CONTRACT §1, Traces: svc (its own process, so that OTEL_EXPORTER_OTLP_ENDPOINT selects tracing as it
// does in production) exports to a real OTLP/HTTP receiver on 127.0.0.1, in JSON, decoded here. For a
// JSON chat call, a stream, a run step and an MCP tool call: the spans, their parent/child links (an
// incoming traceparent continued), the GenAI attributes equal to what the ledger wrote, and no prompt or
// answer text anywhere in what was exported. PostgreSQL only: the child and this process share the
// database.

const SERVER = 2;
const CLIENT = 3;
const ERROR = 2;

const PROMPT = `prompt-text-${randomBytes(6).toString('hex')}`;
const ANSWER = `answer-text-${randomBytes(6).toString('hex')}`;

const hex = (bytes: number) => randomBytes(bytes).toString('hex');
/** A W3C traceparent for a fresh trace, as a caller's own tracing would send it. */
function traceparent() {
  const traceId = hex(16);
  const parentId = hex(8);
  return { traceId, parentId, header: `00-${traceId}-${parentId}-01` };
}

describe.runIf(storageMode() === 'postgres')(
  'OpenTelemetry traces (CONTRACT §1)',
  { timeout: 120_000 },
  () => {
    let server: TestServer;
    let fake: FakeUpstream;
    let receiver: OtlpReceiver;
    let svc: ChildSvc;
    let owner: TestUser;
    let key: string;

    beforeAll(async () => {
      receiver = await startOtlpReceiver();
      fake = await startFakeUpstream();
      server = await startTestServer({ env: fake.env() });
      owner = await createUser(server);
      key = (await createApiToken(server, owner, owner.orgKey)).secret;
      await setOrgBalance(server, owner.orgKey, 1_000_000);
      fake.reply = () => ({ content: `${ANSWER} and more` });
      svc = await startChildSvc(
        fake.env({
          DATABASE_URL: server.databaseUrl!,
          ...receiver.env,
          OTEL_EXPORTER_OTLP_HEADERS: 'x-collector-key=test-collector-key',
          OTEL_SERVICE_NAME: 'svc-under-test',
        }),
      );
    });
    afterAll(async () => {
      await svc?.kill();
      await server?.close();
      await fake?.close();
      await receiver?.close();
    });

    const inTrace = (traceId: string) => receiver.spans.filter((s) => s.traceId === traceId);
    const childrenOf = (span: ReceivedSpan, name?: string | RegExp) =>
      receiver.spans.filter(
        (s) =>
          s.traceId === span.traceId &&
          s.parentSpanId === span.spanId &&
          (name === undefined || (typeof name === 'string' ? s.name === name : name.test(s.name))),
      );
    /** Waits until the trace has a span named `name` (spans leave in batches, a request's last with its end). */
    async function spanIn(traceId: string, name: string | RegExp): Promise<ReceivedSpan> {
      const find = () =>
        inTrace(traceId).find((s) => (typeof name === 'string' ? s.name === name : name.test(s.name)));
      await waitUntil(() => !!find(), 15_000).catch(() => {
        const seen = inTrace(traceId).map((s) => `${s.name} (${s.spanId} < ${s.parentSpanId})`);
        throw new Error(`no span ${String(name)} in the trace; it has: ${seen.join(', ') || 'nothing'}`);
      });
      return find()!;
    }

    /** What the ledger debited for the call `requestId`: its `usage` transaction's amount. */
    async function debitedFor(requestId: string, after: number): Promise<number> {
      const billed = await billedCalls(server, owner.orgKey, after);
      expect(billed.has(requestId)).toBe(true);
      return billed.get(requestId)!;
    }

    /** The chat span's GenAI attributes against the call and the ledger. */
    async function expectChatSpan(chat: ReceivedSpan, after: number) {
      expect(chat.kind).toBe(CLIENT);
      expect(chat.name).toBe('chat svc-test-model');
      const requestId = chat.attributes['svc.request_id'] as string;
      expect(requestId).toMatch(/^req_/);
      const debited = await debitedFor(requestId, after);
      expect(debited).toBeGreaterThan(0);
      expect(chat.attributes).toMatchObject({
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': '127.0.0.1',
        'gen_ai.request.model': 'svc-test-model',
        'gen_ai.response.model': 'provider-model-2026-01-01',
        'svc.org_id': `org_${owner.orgKey}`,
        'svc.credits_debited': debited,
      });
      // The fake provider's usage; at its prices a call debits prompt + 2 × completion tokens.
      const input = chat.attributes['gen_ai.usage.input_tokens'] as number;
      const output = chat.attributes['gen_ai.usage.output_tokens'] as number;
      expect(input).toBeGreaterThan(0);
      expect(output).toBeGreaterThan(0);
      expect(debited).toBe(input + 2 * output);
      return requestId;
    }

    it('a JSON chat call: server span continuing traceparent, hold, chat client span, settle, statements', async () => {
      const after = await lastEntryId(server);
      const tp = traceparent();
      const openai = new OpenAI({ apiKey: key, baseURL: `${svc.url}/v1` });
      const completion = await openai.chat.completions.create(
        { model: 'anything', messages: [{ role: 'user', content: PROMPT }] },
        { headers: { traceparent: tp.header } },
      );
      expect(completion.choices[0]!.message.content).toContain(ANSWER);

      const request = await spanIn(tp.traceId, 'POST /v1/chat/completions');
      expect(request.kind).toBe(SERVER);
      expect(request.parentSpanId).toBe(tp.parentId);
      expect(request.attributes['http.response.status_code']).toBe(200);
      expect(request.attributes['http.route']).toBe('/v1/chat/completions');
      expect(request.resource['service.name']).toBe('svc-under-test');

      const chat = await spanIn(tp.traceId, /^chat /);
      expect(chat.parentSpanId).toBe(request.spanId);
      const requestId = await expectChatSpan(chat, after);
      expect(completion.id).toBeTruthy();

      // The hold and the settle, children of the request, each naming the call; the statements under them.
      const hold = await spanIn(tp.traceId, 'svc.hold');
      expect(hold.parentSpanId).toBe(request.spanId);
      expect(hold.attributes['svc.request_id']).toBe(requestId);
      const settle = await spanIn(tp.traceId, 'svc.settle');
      expect(settle.parentSpanId).toBe(request.spanId);
      expect(settle.attributes).toMatchObject({
        'svc.request_id': requestId,
        'svc.credits_debited': chat.attributes['svc.credits_debited'],
      });
      const statements = childrenOf(settle).filter(
        (s) => s.attributes['db.system.name'] === 'postgresql' || s.attributes['db.system'] === 'postgresql',
      );
      expect(statements.length).toBeGreaterThan(0);
      expect(statements[0]!.kind).toBe(CLIENT);
      // The exporter sent OTEL_EXPORTER_OTLP_HEADERS.
      expect(receiver.headers.some((h) => h['x-collector-key'] === 'test-collector-key')).toBe(true);
    });

    it('a stream: the chat span covers it and carries the debit', async () => {
      const after = await lastEntryId(server);
      const tp = traceparent();
      const openai = new OpenAI({ apiKey: key, baseURL: `${svc.url}/v1` });
      const stream = await openai.chat.completions.create(
        { model: 'anything', messages: [{ role: 'user', content: PROMPT }], stream: true },
        { headers: { traceparent: tp.header } },
      );
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
      expect(text).toContain(ANSWER);
      const request = await spanIn(tp.traceId, 'POST /v1/chat/completions');
      expect(request.parentSpanId).toBe(tp.parentId);
      const chat = await spanIn(tp.traceId, /^chat /);
      expect(chat.parentSpanId).toBe(request.spanId);
      await expectChatSpan(chat, after);
      expect(chat.attributes['gen_ai.response.finish_reasons']).toEqual(['stop']);
      await spanIn(tp.traceId, 'svc.settle');
    });

    it("a failed provider call: the chat span fails with error.type the caller's wire code", async () => {
      const tp = traceparent();
      // The provider answers 500: svc answers 502 `upstream_error` (CONTRACT §3, the OpenAI error object).
      fake.failStatus = 500;
      try {
        const openai = new OpenAI({ apiKey: key, baseURL: `${svc.url}/v1`, maxRetries: 0 });
        const failure = await rejectionOf<InstanceType<typeof OpenAI.APIError>>(
          openai.chat.completions.create(
            { model: 'anything', messages: [{ role: 'user', content: PROMPT }] },
            { headers: { traceparent: tp.header } },
          ),
        );
        expect(failure).toBeInstanceOf(OpenAI.APIError);
        expect(failure.status).toBe(502);
        expect(failure.code).toBe('upstream_error');
      } finally {
        fake.failStatus = null;
      }
      const request = await spanIn(tp.traceId, 'POST /v1/chat/completions');
      const chat = await spanIn(tp.traceId, /^chat /);
      expect(chat.parentSpanId).toBe(request.spanId);
      expect(chat.kind).toBe(CLIENT);
      expect(chat.status).toBe(ERROR);
      expect(chat.attributes['error.type']).toBe('upstream_error');
      // Voided: nothing debited, and nothing of the provider's error text in the span.
      expect(chat.attributes['svc.credits_debited']).toBe(0);
      expect(chat.statusMessage).toBeUndefined();
      expect(request.attributes['http.response.status_code']).toBe(502);
    });

    it('a run step: the run span continues the upgrade traceparent; its model call is a chat span', async () => {
      const after = await lastEntryId(server);
      const tp = traceparent();
      const ws = new WebSocket(`${svc.url.replace('http', 'ws')}/v1/runs/ws`, {
        headers: { traceparent: tp.header },
      });
      const frames: ServerFrame[] = [];
      ws.on('message', (d) => frames.push(parseAs<ServerFrame>((d as Buffer).toString())));
      await new Promise<void>((resolve, reject) => {
        ws.once('open', () => resolve());
        ws.once('error', reject);
      });
      ws.send(JSON.stringify({ type: 'auth', token: key }));
      await waitUntil(() => frames.length > 0, 10_000);
      ws.send(
        JSON.stringify({ type: 'start', agent: 'default', messages: [{ role: 'user', content: PROMPT }] }),
      );
      await waitUntil(() => frames.some((f) => f.type === 'run_completed' || f.type === 'error'), 15_000);
      const completed = frames.find((f) => f.type === 'run_completed') as Extract<
        ServerFrame,
        { type: 'run_completed' }
      >;
      expect(completed).toBeTruthy();
      ws.close();

      const run = await spanIn(tp.traceId, 'invoke_agent default');
      expect(run.kind).toBe(SERVER);
      expect(run.parentSpanId).toBe(tp.parentId);
      expect(run.attributes).toMatchObject({
        'gen_ai.operation.name': 'invoke_agent',
        'gen_ai.agent.name': 'default',
        'svc.run_id': completed.run_id,
      });
      const chat = await spanIn(tp.traceId, /^chat /);
      expect(chat.parentSpanId).toBe(run.spanId);
      expect(chat.attributes['svc.run_id']).toBe(completed.run_id);
      await expectChatSpan(chat, after);
      expect(chat.attributes['svc.credits_debited']).toBe(completed.credits_debited);
      const hold = await spanIn(tp.traceId, 'svc.hold');
      expect(hold.parentSpanId).toBe(run.spanId);
      const settle = await spanIn(tp.traceId, 'svc.settle');
      expect(settle.parentSpanId).toBe(run.spanId);
    });

    it('an MCP tool call: execute_tool {name} inside the request to /mcp/platform', async () => {
      const tokens = await issueTestGrants(server, owner, {
        orgKey: owner.orgKey,
        resources: ['platform'],
        origin: svc.url,
      });
      const tp = traceparent();
      const mcp = new Client({ name: 'traces-test', version: '1.0.0' });
      await mcp.connect(
        new StreamableHTTPClientTransport(new URL('/mcp/platform', svc.url), {
          requestInit: { headers: { authorization: `Bearer ${tokens.platform!}`, traceparent: tp.header } },
        }),
      );
      const result = await mcp.callTool({ name: 'list_projects', arguments: {} });
      expect(result.isError).toBeFalsy();
      const missing = await mcp.callTool({
        name: 'get_project',
        arguments: { project_id: newId('prj') },
      });
      expect(missing.isError).toBe(true);
      await mcp.close();

      const tool = await spanIn(tp.traceId, 'execute_tool list_projects');
      expect(tool.attributes).toMatchObject({
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': 'list_projects',
      });
      // Up its parents to the request's server span, which continues the caller's trace.
      let span: ReceivedSpan | undefined = tool;
      while (span && span.kind !== SERVER)
        span = inTrace(tp.traceId).find((s) => s.spanId === span!.parentSpanId);
      expect(span?.name).toBe('POST /mcp/platform');
      expect(span?.parentSpanId).toBe(tp.parentId);
      const failed = await spanIn(tp.traceId, 'execute_tool get_project');
      expect(failed.status).toBe(ERROR);
    });

    it('never records prompt or answer text, nor the credential', () => {
      expect(receiver.bodies.length).toBeGreaterThan(0);
      const everything = receiver.bodies.join('\n');
      expect(everything).toContain('chat svc-test-model');
      for (const secret of [PROMPT, ANSWER, key]) expect(everything).not.toContain(secret);
      expect(svc.alive()).toBe(true);
    });

    it('by default in protobuf, to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given', async () => {
      // The specification's default protocol; protobuf keeps strings as their UTF-8 bytes, so the span
      // names are found in the raw bodies (and the prompt is not).
      const raw = await startOtlpReceiver();
      const plain = await startChildSvc(
        fake.env({
          DATABASE_URL: server.databaseUrl!,
          OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${raw.url}/v1/traces`,
          OTEL_BSP_SCHEDULE_DELAY: '50',
        }),
      );
      try {
        const openai = new OpenAI({ apiKey: key, baseURL: `${plain.url}/v1` });
        await openai.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: PROMPT }] });
        const exported = (name: string) => raw.bodies.some((b) => b.includes(name));
        await waitUntil(
          () => exported('chat svc-test-model') && exported('POST /v1/chat/completions'),
          15_000,
        );
        expect(raw.contentTypes.every((t) => t === 'application/x-protobuf')).toBe(true);
        const everything = raw.bodies.join('\n');
        for (const secret of [PROMPT, ANSWER, key]) expect(everything).not.toContain(secret);
      } finally {
        await plain.kill();
        await raw.close();
      }
    });
  },
);
