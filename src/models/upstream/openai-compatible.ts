import { Agent, errors as undiciErrors } from 'undici';
import { AppError, errorOf } from '../../http/errors.js';
import { MODEL_ERRORS } from '../errors.js';
import { streamProvider } from './provider-stream.js';
import { completionView, streamView } from './responses-view.js';
import type { ChatChunk, ChatCompletion, NativeResponses, Upstream } from './types.js';

// Any OpenAI-compatible provider (CONTRACT §9: the proxy calls {MODEL_UPSTREAM_URL}/chat/completions).
// One keep-alive undici agent for the process; three timeouts bound every call. Upstream failures become
// errors in the OpenAI vocabulary that never carry the provider's key or address (the interface document:
// "the server holds the upstream model-provider credentials; they are never given to a client").

export interface UpstreamTimeouts {
  /** TCP + TLS connect. */
  connectMs: number;
  /** Until the response headers arrive (time to first byte of a non-streaming call included). */
  headersMs: number;
  /** Longest silence between two body chunks (a stalled stream). */
  bodyIdleMs: number;
}

export const DEFAULT_TIMEOUTS: UpstreamTimeouts = {
  connectMs: 10_000,
  headersMs: 120_000,
  bodyIdleMs: 60_000,
};

export interface OpenAICompatibleOptions {
  url: string;
  key: string | undefined;
  timeouts?: Partial<UpstreamTimeouts>;
  /** Parallel keep-alive connections to the provider per origin. */
  connections?: number;
  /** `responses`: the provider speaks the Responses API too, and POST /v1/responses passes through to it. */
  api?: 'chat' | 'responses';
}

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

/** A provider's `param` or `code` passes only as an identifier: letters, digits, `_ . - [ ]`, at most 64. */
const PLAIN_IDENTIFIER = /^[A-Za-z0-9_.[\]-]{1,64}$/;

/** The allow-listed fields of a provider's error body (OpenAI shape), each only when plain. */
function providerErrorFields(text: string): { param?: string; code?: string } {
  let error: unknown;
  try {
    error = (JSON.parse(text) as { error?: unknown }).error;
  } catch {
    return {};
  }
  if (!error || typeof error !== 'object') return {};
  const plain = (v: unknown) => (typeof v === 'string' && PLAIN_IDENTIFIER.test(v) ? v : undefined);
  const { param, code } = error as { param?: unknown; code?: unknown };
  return { param: plain(param), code: plain(code) };
}

export function createOpenAICompatibleUpstream(options: OpenAICompatibleOptions): Upstream {
  const timeouts = { ...DEFAULT_TIMEOUTS, ...options.timeouts };
  const root = options.url.replace(/\/+$/, '');
  const base = new URL(root + '/chat/completions');
  const responsesUrl = new URL(root + '/responses');
  const agent = new Agent({
    connections: options.connections ?? 128,
    keepAliveTimeout: 30_000,
    connect: { timeout: timeouts.connectMs },
    headersTimeout: timeouts.headersMs,
    bodyTimeout: timeouts.bodyIdleMs,
  });
  function networkError(err: unknown, signal: AbortSignal): Error {
    if (signal.aborted) return signal.reason instanceof Error ? signal.reason : new Error('aborted');
    if (err instanceof AppError) return err;
    const code = (err as { code?: string }).code ?? '';
    if (
      TIMEOUT_CODES.has(code) ||
      err instanceof undiciErrors.HeadersTimeoutError ||
      err instanceof undiciErrors.BodyTimeoutError
    ) {
      return errorOf(MODEL_ERRORS, 'UPSTREAM_TIMEOUT', 'the model provider did not answer in time');
    }
    return errorOf(MODEL_ERRORS, 'UPSTREAM_UNAVAILABLE', 'the model provider could not be reached');
  }

  function statusError(status: number, headers: Record<string, unknown>, text: string): AppError {
    if (status === 429) {
      const retry = Number(headers['retry-after']);
      return errorOf(MODEL_ERRORS, 'UPSTREAM_RATE_LIMITED', undefined, {
        headers: { 'Retry-After': String(Number.isFinite(retry) && retry > 0 ? Math.ceil(retry) : 1) },
      });
    }
    // The request itself was refused (bad messages, unsupported parameter): the caller can fix it.
    // Its message is never relayed: providers put their host, organization id and key fragments in it
    //. The caller gets a fixed message and, of the provider's error, only `param` and
    // `code` when they are plain identifiers (e.g. messages / context_length_exceeded), enough for an
    // OpenAI SDK to tell what to fix.
    if (status === 400 || status === 404 || status === 413 || status === 422) {
      const { param, code } = providerErrorFields(text);
      const extra = param ? { param } : {};
      const rejected = 'the model provider rejected the request';
      // error-catalogue: the provider's own code passed through (UPSTREAM_REJECTED when it gives none).
      if (code) return new AppError(400, code, rejected, extra);
      return errorOf(MODEL_ERRORS, 'UPSTREAM_REJECTED', rejected, extra);
    }
    // 401/403 mean our provider key is wrong, 5xx theirs: either way the caller can do nothing about it.
    return errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider failed to answer');
  }

  function requestOptions(body: Record<string, unknown>, url = base) {
    return {
      origin: url.origin,
      path: url.pathname + url.search,
      method: 'POST' as const,
      headers: {
        'content-type': 'application/json',
        accept: body.stream ? 'text/event-stream' : 'application/json',
        'accept-encoding': 'identity',
        ...(options.key ? { authorization: `Bearer ${options.key}` } : {}),
      },
      body: JSON.stringify(body),
    };
  }

  async function send(body: Record<string, unknown>, signal: AbortSignal, url = base) {
    try {
      const res = await agent.request({ ...requestOptions(body, url), signal });
      if (res.statusCode >= 300) {
        const text = await res.body.text().catch(() => '');
        throw statusError(res.statusCode, res.headers, text);
      }
      return res;
    } catch (err) {
      throw networkError(err, signal);
    }
  }

  function parseChunk(data: string): ChatChunk {
    let chunk: ChatChunk & { error?: unknown };
    try {
      chunk = JSON.parse(data) as ChatChunk & { error?: unknown };
    } catch {
      throw errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider sent a malformed stream');
    }
    if (chunk.error) throw errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider failed mid-stream');
    return chunk;
  }

  // POST {url}/responses, the same agent, timeouts and error vocabulary as chat (MODEL_UPSTREAM_API).
  const responses: NativeResponses = {
    async complete(body, signal) {
      const res = await send({ ...body, stream: false }, signal, responsesUrl);
      let parsed: unknown;
      try {
        parsed = await res.body.json();
      } catch (err) {
        if (err instanceof SyntaxError)
          throw errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider sent a malformed answer');
        throw networkError(err, signal);
      }
      return completionView(parsed);
    },
    async *stream(body, signal) {
      const view = streamView();
      const events = streamProvider(agent, requestOptions({ ...body, stream: true }, responsesUrl), signal, {
        parse: (data) => view.event(data),
        statusError,
        networkError: (err) => networkError(err, signal),
      });
      yield* events;
      // A Responses stream has no [DONE]: it ends with response.completed (or .incomplete). A body that
      // ends before is a provider failing mid-stream, billed for what it delivered (CONTRACT §8).
      if (!view.ended && !signal.aborted)
        throw errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider ended the stream early');
    },
  };

  return {
    kind: 'openai-compatible',
    ...(options.api === 'responses' ? { responses } : {}),
    async complete(body, signal) {
      const res = await send({ ...body, stream: false }, signal);
      try {
        const parsed = (await res.body.json()) as ChatCompletion;
        if (!parsed || !Array.isArray(parsed.choices))
          throw errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider sent a malformed answer');
        return parsed;
      } catch (err) {
        if (err instanceof SyntaxError)
          throw errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider sent a malformed answer');
        throw networkError(err, signal);
      }
    },
    stream(body, signal) {
      return streamProvider(agent, requestOptions({ ...body, stream: true }), signal, {
        parse: parseChunk,
        statusError,
        networkError: (err) => networkError(err, signal),
      });
    },
    connections() {
      let busy = 0;
      let idle = 0;
      for (const origin of Object.values(agent.stats)) {
        const { connected, free } = origin as { connected: number; free: number };
        busy += connected - free;
        idle += free;
      }
      return { busy, idle };
    },
    async close() {
      await agent.close();
    },
  };
}
