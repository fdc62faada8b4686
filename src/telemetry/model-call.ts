import type { Attributes, Span } from '@opentelemetry/api';
import { tracer } from './spans.js';

// A provider call's client span (CONTRACT §1): `chat {model}` with the GenAI semantic conventions'
// attributes, svc.credits_debited and svc.org_id. It opens when the provider is asked (traceModelCall wraps
// the provider the call uses) and ends when the call is settled or voided (src/models/metering/settle.ts), so that
// it carries what the ledger debited. Only what the provider's answer says about itself is read (its
// model, id, finish reasons): never a prompt, a message or an answer's text.

/** What a provider's answer or chunk may say about itself. */
interface AnswerHead {
  id?: unknown;
  model?: unknown;
  choices?: readonly { finish_reason?: unknown }[];
}

/** The provider side of a call, as src/models/upstream/types.ts's ProviderLeg has it. */
export interface ModelLeg<B, C extends AnswerHead, K extends AnswerHead> {
  complete(body: B, signal: AbortSignal): Promise<C>;
  stream(body: B, signal: AbortSignal): AsyncIterable<K>;
}

export interface ModelCallInfo {
  /** The model svc asks the provider for (MODEL_ID). */
  requestModel: string;
  /** gen_ai.provider.name (providerName below). */
  provider: string;
  /** `org_…` */
  orgId: string;
  requestId: string;
  runId?: string;
}

/** Open spans by their call (a PreparedCall): settle and void end them. */
interface OpenCall {
  span: Span;
  finish: Set<string>;
  failed: boolean;
}
const open = new WeakMap<object, OpenCall>();

/**
 * `leg` for the call `key`, with a client span opened at its request (a stream's at its first read's
 * start). With tracing off, `leg` itself.
 */
export function traceModelCall<B, C extends AnswerHead, K extends AnswerHead>(
  key: object,
  describe: () => ModelCallInfo,
  leg: ModelLeg<B, C, K>,
): ModelLeg<B, C, K> {
  const t = tracer();
  if (!t) return leg;
  const info = describe();
  const begin = () => {
    const span = t.start(`chat ${info.requestModel}`, {
      kind: 'client',
      attributes: {
        'gen_ai.operation.name': 'chat',
        'gen_ai.provider.name': info.provider,
        'gen_ai.request.model': info.requestModel,
        'svc.org_id': info.orgId,
        'svc.request_id': info.requestId,
        ...(info.runId ? { 'svc.run_id': info.runId } : {}),
      },
    });
    const entry: OpenCall = { span, finish: new Set<string>(), failed: false };
    open.set(key, entry);
    return entry;
  };
  // The provider's own failure (a timeout, a refusal) names the span's error.type.
  const failed = (entry: OpenCall, err: unknown) => {
    entry.failed = true;
    t.fail(entry.span, asOnTheWire(err));
    return err;
  };
  const head = (entry: OpenCall, answer: AnswerHead, first: boolean) => {
    if (first && typeof answer.model === 'string')
      entry.span.setAttribute('gen_ai.response.model', answer.model);
    if (first && typeof answer.id === 'string') entry.span.setAttribute('gen_ai.response.id', answer.id);
    for (const choice of answer.choices ?? [])
      if (typeof choice.finish_reason === 'string') entry.finish.add(choice.finish_reason);
  };
  return {
    async complete(body, signal) {
      const entry = begin();
      const answer = await leg.complete(body, signal).catch((err: unknown) => {
        throw failed(entry, err);
      });
      head(entry, answer, true);
      return answer;
    },
    // The provider's iterator with each chunk read on its way: no generator of its own in between,
    // which cost a promise and a turn of the microtask queue per chunk, the first byte's among them
    // (decision 0121).
    stream(body, signal) {
      return {
        [Symbol.asyncIterator]() {
          const entry = begin();
          const chunks = leg.stream(body, signal)[Symbol.asyncIterator]();
          let first = true;
          const read = (result: IteratorResult<K>) => {
            if (!result.done) {
              head(entry, result.value, first);
              first = false;
            }
            return result;
          };
          const fail = (err: unknown): never => {
            throw failed(entry, err);
          };
          return {
            next: () => chunks.next().then(read, fail),
            // The reader stopped early (a client gone, a cap reached): the provider's stream stops too.
            return: (value?: unknown) =>
              chunks.return
                ? chunks.return(value)
                : Promise.resolve({ done: true as const, value: undefined }),
          };
        },
      };
    },
  };
}

/**
 * A failure as the caller read it: the model routes and run frames lower-case every code (CONTRACT §3,
 * the OpenAI error object; src/models/errors.ts), so the span's error.type is `upstream_error`, the code a
 * client saw, not UPSTREAM_ERROR. An error without a code goes on as it is (its class names it).
 */
function asOnTheWire(err: unknown): unknown {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? { code: code.toLowerCase() } : err;
}

/** The call was settled: its usage and the debit as the ledger wrote them; the span ends. */
export function modelCallSettled(
  key: object,
  settled: { inputTokens: number; outputTokens: number; creditsDebited: number },
): void {
  end(key, {
    'gen_ai.usage.input_tokens': settled.inputTokens,
    'gen_ai.usage.output_tokens': settled.outputTokens,
    'svc.credits_debited': settled.creditsDebited,
  });
}

/** The settle could not be written now (kept and retried: src/models/metering/pending-settles.ts); the span ends. */
export function modelCallSettleKept(key: object, usage: { inputTokens: number; outputTokens: number }): void {
  end(key, {
    'gen_ai.usage.input_tokens': usage.inputTokens,
    'gen_ai.usage.output_tokens': usage.outputTokens,
    'svc.settle.pending': true,
  });
}

/** The call failed and its hold was voided: nothing debited; the span ends as failed. */
export function modelCallVoided(key: object, err?: unknown): void {
  const entry = open.get(key);
  if (!entry) return;
  if (!entry.failed) tracer()?.fail(entry.span, asOnTheWire(err ?? new Error('voided')));
  end(key, { 'svc.credits_debited': 0 });
}

function end(key: object, attributes: Attributes) {
  const entry = open.get(key);
  if (!entry) return;
  open.delete(key);
  if (entry.finish.size) attributes['gen_ai.response.finish_reasons'] = [...entry.finish];
  entry.span.setAttributes(attributes);
  entry.span.end();
}

/** Well-known gen_ai.provider.name values by the provider's host; any other host names itself. */
const KNOWN_PROVIDERS: [RegExp, string][] = [
  [/(^|\.)openai\.azure\.com$/, 'azure.ai.openai'],
  [/(^|\.)openai\.com$/, 'openai'],
  [/(^|\.)anthropic\.com$/, 'anthropic'],
  [/(^|\.)groq\.com$/, 'groq'],
  [/(^|\.)deepseek\.com$/, 'deepseek'],
  [/(^|\.)mistral\.ai$/, 'mistral_ai'],
  [/(^|\.)x\.ai$/, 'x_ai'],
  [/(^|\.)perplexity\.ai$/, 'perplexity'],
  [/^generativelanguage\.googleapis\.com$/, 'gcp.gemini'],
];

let named: { url: string | undefined; name: string } | null = null;

/** gen_ai.provider.name for MODEL_UPSTREAM_URL (unset: svc's built-in model, `svc`). */
export function providerName(upstreamUrl: string | undefined): string {
  if (named === null || named.url !== upstreamUrl) named = { url: upstreamUrl, name: nameOf(upstreamUrl) };
  return named.name;
}

function nameOf(upstreamUrl: string | undefined): string {
  if (!upstreamUrl) return 'svc';
  let host: string;
  try {
    host = new URL(upstreamUrl).hostname;
  } catch {
    return 'openai_compatible';
  }
  return KNOWN_PROVIDERS.find(([pattern]) => pattern.test(host))?.[1] ?? host;
}
