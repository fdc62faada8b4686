import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ChatCompletionCreateParamsBase } from 'openai/resources/chat/completions/completions';
import { answerResponses, type FakeReply, type ResponsesBody } from './fake-upstream-responses.js';
import { contentChunkGoes, sleep } from './fake-stream-faults.js';

export type { FakeReply };

// A local OpenAI-compatible provider over real HTTP (node:http) for the model suites and the proxy bench.
// It speaks POST /v1/chat/completions, JSON and SSE, and POST /v1/responses, JSON and its event stream
// (fake-upstream-responses.ts), with knobs for delays, failures and usage, and
// records every request it got so a test can see what the proxy sent (forced model, capped limits,
// include_usage, the provider key).
//
// Token accounting is simple and exact: completion_tokens = words streamed (one chunk per word) + 5 per
// tool call; prompt_tokens = `promptTokens` (default 10), or, with `promptFromFields`, as a real provider
// counts: every field it reads as prompt (messages, tools, functions, tool_choice, function_call,
// response_format; on /v1/responses input, instructions, tools, tool_choice, text), about 4 bytes a
// token; prompt_tokens_details.cached_tokens = `cachedTokens` when the reply sets it (else no
// prompt_tokens_details at all). Every request is kept in `received` with when it came and the prompt it
// counts that way, whether or not anyone stays for its answer.

/** What a client sends to POST /v1/chat/completions, as the openai SDK types it. */
export type ChatRequest = ChatCompletionCreateParamsBase;

export interface FakeRequest {
  headers: IncomingMessage['headers'];
  body: ChatRequest;
}

/** A request as the provider bills it: when it came, and its prompt counted from every prompt field. */
export interface ReceivedRequest {
  at: number;
  path: string;
  promptTokens: number;
}

const CHAT_PROMPT_FIELDS = [
  'messages',
  'tools',
  'functions',
  'tool_choice',
  'function_call',
  'response_format',
];
const RESPONSES_PROMPT_FIELDS = ['input', 'instructions', 'tools', 'tool_choice', 'text'];

/** Every prompt-bearing field of a request, about 4 bytes a token (as the real providers count). */
export function fieldPromptTokens(body: Record<string, unknown>, responses = false): number {
  let bytes = 0;
  for (const field of responses ? RESPONSES_PROMPT_FIELDS : CHAT_PROMPT_FIELDS)
    if (body[field] != null) bytes += Buffer.byteLength(JSON.stringify(body[field]));
  return Math.ceil(bytes / 4);
}

export interface FakeUpstream {
  /** Base URL to use as MODEL_UPSTREAM_URL (ends in /v1). */
  url: string;
  requests: FakeRequest[];
  /** What POST /v1/responses got (the pass-through's requests). */
  responsesRequests: { headers: IncomingMessage['headers']; body: ResponsesBody }[];
  /** What to answer (default: "Hello from the fake upstream"). */
  reply: (body: ChatRequest) => FakeReply;
  /** What to answer on POST /v1/responses (the same default). */
  responsesReply: (body: ResponsesBody) => FakeReply;
  /** How a Responses stream ends (fake-upstream-responses.ts). */
  responsesEnding: 'completed' | 'failed' | 'cut';
  /** Every request received, in order, with when it came and its prompt counted from every field. */
  received: ReceivedRequest[];
  /** Bill prompt_tokens from every prompt-bearing field (fieldPromptTokens) instead of `promptTokens`. */
  promptFromFields: boolean;
  /**
   * Holds every answer (JSON or stream) until the returned function is called: a provider still working
   * while its caller leaves. Released by reset() too.
   */
  holdAnswers(): () => void;
  /** Answer with this HTTP status and an OpenAI error body instead. */
  failStatus: number | null;
  /** Wait this long before the response headers. */
  headersDelayMs: number;
  /** Wait this long between stream chunks. */
  chunkDelayMs: number;
  /** Streams: send `data: [DONE]` and end the body this much later (0: both in one write). */
  endDelayMs: number;
  /** Break the stream (destroy the socket) after this many content chunks. */
  breakAfterChunks: number | null;
  /** Stop sending (the connection stays open, silent) after this many content chunks. */
  stallAfterChunks: number | null;
  /** Answer without `usage` (JSON replies and streams), as some providers do. */
  omitUsage: boolean;
  /** Streams that were cut by the client before the end. */
  abortedStreams: number;
  /** Content chunks written to chat streams so far, all streams together: words a caller was sent. */
  contentChunksSent: number;
  /** TCP connections accepted so far (keep-alive reuse shows as few connections for many calls). */
  connections: number;
  /** Requests currently being answered. */
  inFlight: number;
  maxInFlight: number;
  /** Back to the defaults above (between tests). */
  reset(): void;
  /**
   * svc's configuration pointed at this provider, with prices that make the arithmetic visible: 90,000
   * ¢/M input and 180,000 ¢/M output, so a call debits exactly prompt + 2 × completion tokens.
   */
  env(extra?: Record<string, string>): Record<string, string>;
  close(): Promise<void>;
}

/** The prices of FakeUpstream.env, for tests of the built-in model too. */
export const TEST_PRICES = { MODEL_PRICE_INPUT: '90000', MODEL_PRICE_OUTPUT: '180000' };

export const FAKE_KEY = 'sk-fake-provider-secret-123';

const words = (text: string) => text.match(/\s*\S+/g) ?? [];

export async function startFakeUpstream(): Promise<FakeUpstream> {
  const sockets = new Set<import('node:net').Socket>();
  let gate: Promise<void> | null = null;
  let releaseGate = () => {};
  const state: FakeUpstream = {
    url: '',
    requests: [],
    responsesRequests: [],
    received: [],
    promptFromFields: false,
    holdAnswers() {
      releaseGate();
      let release!: () => void;
      gate = new Promise<void>((resolve) => (release = resolve));
      releaseGate = () => {
        gate = null;
        release();
      };
      return releaseGate;
    },
    reply: () => ({ content: 'Hello from the fake upstream' }),
    responsesReply: () => ({ content: 'Hello from the fake upstream' }),
    responsesEnding: 'completed',
    failStatus: null,
    headersDelayMs: 0,
    chunkDelayMs: 0,
    endDelayMs: 0,
    breakAfterChunks: null,
    stallAfterChunks: null,
    omitUsage: false,
    abortedStreams: 0,
    contentChunksSent: 0,
    connections: 0,
    inFlight: 0,
    maxInFlight: 0,
    reset() {
      state.reply = () => ({ content: 'Hello from the fake upstream' });
      state.responsesReply = () => ({ content: 'Hello from the fake upstream' });
      state.responsesEnding = 'completed';
      state.failStatus = null;
      state.headersDelayMs = 0;
      state.chunkDelayMs = 0;
      state.endDelayMs = 0;
      state.breakAfterChunks = null;
      state.stallAfterChunks = null;
      state.omitUsage = false;
      state.promptFromFields = false;
      releaseGate();
    },
    env: (extra = {}) => ({
      MODEL_UPSTREAM_URL: state.url,
      MODEL_UPSTREAM_KEY: FAKE_KEY,
      MODEL_ID: 'svc-test-model',
      ...TEST_PRICES,
      ...extra,
    }),
    close: async () => {},
  };

  async function handle(req: IncomingMessage, res: ServerResponse) {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const responses = req.url === '/v1/responses';
    if (req.method !== 'POST' || (req.url !== '/v1/chat/completions' && !responses)) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"message":"not found"}}');
      return;
    }
    const text = Buffer.concat(chunks).toString('utf8');
    // This request's own body, kept here: after the awaits below, the lists' last entries may be another
    // request's (concurrent calls, one streamed and one not).
    const responsesBody = responses ? (JSON.parse(text) as ResponsesBody) : undefined;
    const chatBody = responses ? undefined : (JSON.parse(text) as ChatRequest);
    if (responsesBody) state.responsesRequests.push({ headers: req.headers, body: responsesBody });
    if (chatBody) state.requests.push({ headers: req.headers, body: chatBody });
    const promptTokens = fieldPromptTokens((responsesBody ?? chatBody) as Record<string, unknown>, responses);
    state.received.push({ at: Date.now(), path: req.url ?? '', promptTokens });
    await sleep(state.headersDelayMs); // the scenario knob: a provider slow to answer
    if (gate) await gate;
    if (state.failStatus) {
      res.writeHead(state.failStatus, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          error: { message: `provider failure at ${state.url} with key ${FAKE_KEY}`, type: 'server_error' },
        }),
      );
      return;
    }
    if (responsesBody) return answerResponses(state, responsesBody, res, promptTokens);
    const body = chatBody!;
    const reply = state.reply(body);
    const limit = body.max_completion_tokens ?? body.max_tokens ?? Infinity;
    let pieces: string[] = words(reply.content ?? '');
    let finish = reply.toolCalls?.length ? 'tool_calls' : 'stop';
    if (pieces.length > limit) {
      pieces = pieces.slice(0, limit);
      finish = 'length';
    }
    const prompt = state.promptFromFields ? promptTokens : (reply.promptTokens ?? 10);
    const completion = pieces.length + 5 * (reply.toolCalls?.length ?? 0);
    const usage = {
      prompt_tokens: prompt,
      completion_tokens: completion,
      total_tokens: prompt + completion,
      ...(reply.cachedTokens !== undefined
        ? { prompt_tokens_details: { cached_tokens: reply.cachedTokens } }
        : {}),
    };
    const id = `chatcmpl-fake${state.requests.length}`;
    const created = Math.floor(Date.now() / 1000);
    const model = 'provider-model-2026-01-01';
    const toolCalls = (reply.toolCalls ?? []).map((t, i) => ({
      id: `call_fake_${state.requests.length}_${i}`,
      type: 'function',
      function: t,
    }));

    if (!body.stream) {
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          id,
          object: 'chat.completion',
          created,
          model,
          choices: [
            {
              index: 0,
              message: {
                role: 'assistant',
                content: toolCalls.length ? null : pieces.join(''),
                ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
              },
              finish_reason: finish,
            },
          ],
          ...(state.omitUsage ? {} : { usage }),
        }),
      );
      return;
    }
    const includeUsage = !!body.stream_options?.include_usage && !state.omitUsage;
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const send = (choices: unknown[], extra: Record<string, unknown> = {}) =>
      res.write(
        `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices, ...(includeUsage ? { usage: null } : {}), ...extra })}\n\n`,
      );
    send([
      { index: 0, delta: { role: 'assistant', content: toolCalls.length ? null : '' }, finish_reason: null },
    ]);
    let sent = 0;
    for (const piece of pieces) {
      if (!(await contentChunkGoes(state, res, sent))) return;
      send([{ index: 0, delta: { content: piece }, finish_reason: null }]);
      sent++;
      state.contentChunksSent++;
    }
    toolCalls.forEach((t, i) => {
      send([
        {
          index: 0,
          delta: {
            tool_calls: [
              { index: i, id: t.id, type: 'function', function: { name: t.function.name, arguments: '' } },
            ],
          },
          finish_reason: null,
        },
      ]);
      send([
        {
          index: 0,
          delta: { tool_calls: [{ index: i, function: { arguments: t.function.arguments } }] },
          finish_reason: null,
        },
      ]);
    });
    send([{ index: 0, delta: {}, finish_reason: finish }]);
    if (includeUsage) send([], { usage });
    if (state.endDelayMs > 0) {
      // [DONE], then the end of the body later, in a packet of its own.
      res.write('data: [DONE]\n\n');
      setTimeout(() => res.end(), state.endDelayMs);
    } else res.end('data: [DONE]\n\n');
  }

  const server: Server = createServer((req, res) => {
    state.inFlight++;
    state.maxInFlight = Math.max(state.maxInFlight, state.inFlight);
    res.on('close', () => state.inFlight--);
    handle(req, res).catch(() => res.destroy());
  });
  server.keepAliveTimeout = 60_000;
  server.on('connection', (s) => {
    sockets.add(s);
    state.connections++;
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  state.close = () =>
    new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    });
  return state;
}
