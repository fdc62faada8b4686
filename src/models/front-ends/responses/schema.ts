import { z } from 'zod';
import { parse } from '../../../http/validate.js';
import { firstUnknownKey, unsupportedParameterError } from '../../schema.js';

// The body of POST /v1/responses (OpenAI Responses API), as far as svc serves it: text and image input,
// function tools and their outputs, structured output, streaming, and conversations kept in svc
// (`store`, `previous_response_id`). The same rule as chat (docs/billing.md "Request parameters"): only
// the parameters of this allow-list are taken; any other is 400 `unsupported_parameter` naming it —
// among them `service_tier` (priority pricing), `background`, `conversation`, `prompt` (a prompt kept at
// the provider), built-in tools (`web_search`, `file_search`, … cost per use: refused as a tool type).

const text = z.looseObject({ type: z.enum(['input_text', 'output_text']), text: z.string() });
const refusal = z.looseObject({ type: z.literal('refusal'), refusal: z.string() });
const image = z.looseObject({
  type: z.literal('input_image'),
  image_url: z.string().max(20_000_000),
  detail: z.enum(['low', 'high', 'auto']).nullish(),
});
export const contentPart = z.discriminatedUnion('type', [text, refusal, image]);
export type ContentPart = z.output<typeof contentPart>;

const messageItem = z.looseObject({
  type: z.literal('message').optional(),
  role: z.enum(['user', 'assistant', 'system', 'developer']),
  content: z.union([z.string(), z.array(contentPart).max(1_000)]),
});
const functionCall = z.looseObject({
  type: z.literal('function_call'),
  call_id: z.string().min(1).max(256),
  name: z.string().min(1).max(64),
  arguments: z.string(),
});
const functionCallOutput = z.looseObject({
  type: z.literal('function_call_output'),
  call_id: z.string().min(1).max(256),
  output: z.union([z.string(), z.array(contentPart).max(1_000)]),
});
/** An output item of a response stored here, by its id (the AI SDK sends these when `store` is on). */
const itemReference = z.looseObject({ type: z.literal('item_reference'), id: z.string().max(256) });

export const inputItem = z.union([functionCall, functionCallOutput, itemReference, messageItem]);
export type InputItem = z.output<typeof inputItem>;

const functionTool = z.looseObject({
  type: z.literal('function'),
  name: z.string().min(1).max(64),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});

const format = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('text') }),
  z.looseObject({ type: z.literal('json_object') }),
  z.looseObject({
    type: z.literal('json_schema'),
    name: z.string().min(1).max(64),
    description: z.string().nullish(),
    schema: z.record(z.string(), z.unknown()),
    strict: z.boolean().nullish(),
  }),
]);

export const responsesRequest = z.strictObject({
  model: z.string().optional(),
  input: z.union([z.string(), z.array(inputItem).min(1).max(10_000)]),
  instructions: z.string().nullish(),
  tools: z.array(functionTool).max(128).nullish(),
  tool_choice: z
    .union([
      z.enum(['auto', 'none', 'required']),
      z.looseObject({ type: z.literal('function'), name: z.string().min(1).max(64) }),
    ])
    .nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  max_output_tokens: z.number().int().positive().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  text: z.looseObject({ format: format.optional(), verbosity: z.unknown().optional() }).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({}).nullish(),
  /** Kept in svc (table stored_responses), never at the provider; OpenAI's default is true. */
  store: z.boolean().nullish(),
  previous_response_id: z.string().max(256).nullish(),
  /** Kept with a stored response and answered back; never sent to the provider. */
  metadata: z.record(z.string().max(64), z.string().max(512)).nullish(),
  // Read but never passed on: the provider gets svc's own opaque id of the acting user (as on chat).
  user: z.unknown().optional(),
  safety_identifier: z.unknown().optional(),
  prompt_cache_key: z.string().max(256).nullish(),
  reasoning: z.looseObject({ effort: z.string().nullish() }).nullish(),
  // Allowed only in the value that changes nothing.
  truncation: z.literal('disabled').nullish(),
  include: z.array(z.string()).max(0).nullish(),
});
export type ResponsesRequest = z.output<typeof responsesRequest>;

const ALLOWED = new Set(Object.keys(responsesRequest.shape));

/** 400 `unsupported_parameter` for a key off the allow-list or a value that is not served, else zod's 400. */
export function parseResponsesRequest(body: unknown): ResponsesRequest {
  const unknown = firstUnknownKey(body, ALLOWED);
  if (unknown !== null)
    throw unsupportedParameterError({ param: unknown, why: 'is not supported by this server' });
  const record = body as Record<string, unknown> | null;
  if (record?.truncation != null && record.truncation !== 'disabled')
    throw unsupportedParameterError({ param: 'truncation', why: "may only be 'disabled'" });
  if (Array.isArray(record?.include) && record.include.length > 0)
    throw unsupportedParameterError({ param: 'include', why: 'may only be empty' });
  return parse(responsesRequest, body);
}
