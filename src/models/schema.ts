import { z } from 'zod';

import { AppError, errorOf } from '../http/errors.js';
import { MODEL_ERRORS } from './errors.js';
import { parse } from '../http/validate.js';

// zod shapes of the model routes' inputs. The chat request is an OpenAI request passed on to the provider
// with only the parameters of a documented allow-list (CONTRACT §8; docs/billing.md "Request parameters"):
// nothing that changes the provider's price or keeps callers' data at the provider passes unpriced.

/**
 * OpenAI message content: a string, or an array of typed parts (text, image_url, …; the parts' own fields
 * are the provider's to judge), or null (an assistant turn that only calls tools). Anything else is the
 * caller's mistake, answered 400 here whichever model serves the call (a provider would refuse it too).
 */
export const messageContent = z.union([z.string(), z.array(z.looseObject({ type: z.string() })), z.null()]);

const message = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool', 'function']),
  content: messageContent.optional(),
  tool_calls: z
    .array(
      z.looseObject({
        id: z.string(),
        type: z.literal('function').default('function'),
        function: z.looseObject({ name: z.string(), arguments: z.string().default('') }),
      }),
    )
    .optional(),
  tool_call_id: z.string().optional(),
});

const tool = z.looseObject({
  type: z.string(),
  function: z
    .looseObject({
      name: z.string().min(1).max(64),
      description: z.string().optional(),
      parameters: z.record(z.string(), z.unknown()).optional(),
    })
    .optional(),
});

/**
 * The parameters /v1/chat/completions passes on: those the OpenAI SDKs, the AI SDK and LangChain send in
 * practice for text and tool calls, none of which makes a call cost more than its capped output bounds.
 * Refused with 400 `unsupported_parameter` (as OpenAI answers an unknown argument): anything else, among
 * them `service_tier` (priority pricing), `audio`/`modalities` other than text (audio output pricing),
 * `web_search_options` (per-search fees), `prediction` (rejected prediction tokens are billed beyond
 * max_tokens), `store: true` and `metadata` (callers' conversations kept in the operator's account).
 */
const passThrough = z.unknown().optional();

/** OpenAI's three output formats; svc-local honours all three (src/models/upstream/local-structured.ts). */
export const responseFormat = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('text') }),
  z.looseObject({ type: z.literal('json_object') }),
  z.looseObject({
    type: z.literal('json_schema'),
    json_schema: z.looseObject({
      name: z.string().min(1).max(64),
      description: z.string().optional(),
      schema: z.record(z.string(), z.unknown()).optional(),
      strict: z.boolean().nullish(),
    }),
  }),
]);

export const chatRequest = z
  .strictObject({
    model: z.string().optional(),
    messages: z.array(message).min(1).max(10_000),
    stream: z.boolean().nullish(),
    stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
    max_tokens: z.number().int().positive().nullish(),
    max_completion_tokens: z.number().int().positive().nullish(),
    n: z.number().int().min(1).max(8).nullish(),
    tools: z.array(tool).max(128).optional(),
    tool_choice: z.unknown().optional(),
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().min(0).max(1).nullish(),
    parallel_tool_calls: passThrough,
    stop: passThrough,
    presence_penalty: passThrough,
    frequency_penalty: passThrough,
    logit_bias: passThrough,
    logprobs: passThrough,
    top_logprobs: passThrough,
    seed: passThrough,
    response_format: responseFormat.nullish(),
    reasoning_effort: passThrough,
    verbosity: passThrough,
    prompt_cache_key: passThrough,
    functions: passThrough,
    function_call: passThrough,
    // Read but never passed on: the provider gets svc's own opaque id of the acting user instead
    // (upstreamUserId), so abuse reports reach a user without the caller choosing whom, or leaking e-mails.
    user: passThrough,
    safety_identifier: passThrough,
    // Allowed only in the value that changes nothing: not stored, text output.
    store: z.literal(false).nullish(),
    modalities: z.tuple([z.literal('text')]).nullish(),
  })
  // As OpenAI answers it: stream options without a stream are a mistake (400, param stream_options), not
  // silently dropped.
  .refine((r) => r.stream_options == null || r.stream === true, {
    path: ['stream_options'],
    message: "stream_options is only allowed when 'stream' is true",
  });

/** The allow-listed parameters (the keys of chatRequest), for the check that names the first other one. */
const ALLOWED_PARAMETERS = new Set(Object.keys(chatRequest.shape));

/** The first parameter of a chat request that is not passed on, with the value rule it breaks (or null). */
function unsupportedParameter(body: unknown): { param: string; why: string } | null {
  if (!body || typeof body !== 'object' || Array.isArray(body)) return null;
  const record = body as Record<string, unknown>;
  const unknown = firstUnknownKey(record, ALLOWED_PARAMETERS);
  if (unknown !== null) return { param: unknown, why: 'is not supported by this server' };
  if (record.store != null && record.store !== false)
    return { param: 'store', why: 'may only be false: conversations are not stored at the provider' };
  const m = record.modalities;
  if (m != null && !(Array.isArray(m) && m.length === 1 && m[0] === 'text'))
    return { param: 'modalities', why: 'may only be ["text"]' };
  return null;
}

/** Parses a chat request: 400 `unsupported_parameter` naming a parameter off the allow-list, else zod. */
export function parseChatRequest(body: unknown): ChatRequest {
  const unsupported = unsupportedParameter(body);
  if (unsupported) throw unsupportedParameterError(unsupported);
  return parse(chatRequest, body);
}

/** The 400 every model front-end answers for a parameter it does not pass on (as OpenAI answers it). */
export function unsupportedParameterError(unsupported: { param: string; why: string }): AppError {
  return errorOf(
    MODEL_ERRORS,
    'UNSUPPORTED_PARAMETER',
    `Unsupported parameter: '${unsupported.param}' ${unsupported.why}.`,
    { param: unsupported.param },
  );
}

/** The first key of a request body outside `allowed` (an allow-list), or null. */
export function firstUnknownKey(body: unknown, allowed: ReadonlySet<string>): string | null {
  if (!body || typeof body !== 'object' || Array.isArray(body)) return null;
  for (const key of Object.keys(body)) if (!allowed.has(key)) return key;
  return null;
}

export type ChatRequest = z.output<typeof chatRequest>;

export const orgQuery = z.object({ org_id: z.string().max(100).optional() }).loose();
