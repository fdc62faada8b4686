import { z } from 'zod';
import { parse } from '../../../http/validate.js';
import { firstUnknownKey, unsupportedParameterError } from '../../schema.js';

// The body of POST /v1/messages (Anthropic Messages API), as far as svc serves it: text and image
// content, tools and their results, streaming. The same rule as chat (docs/billing.md "Request
// parameters"): only the parameters of this allow-list are taken; any other is 400 naming it — among
// them `service_tier`, `top_k` (no chat completions equivalent: not silently dropped), `mcp_servers` and
// `container` (run at the provider), server tools (`web_search_…`, refused as a tool without
// `input_schema`), `output_config.format`.
//
// Taken and not applied (docs/models.md "Messages: what Claude Code sends"): `thinking`, `output_config.effort`
// and `context_management` say how hard the model should think and which old thinking or tool turns the
// provider may trim. Claude Code sends all three on every request; the chat completions call svc makes
// has no place for them, so the answer carries no thinking blocks and the whole conversation is sent
// (and billed as sent). What the answer means does not change, so they are taken rather than refused.

const cacheControl = z.unknown().optional();
const textBlock = z.looseObject({ type: z.literal('text'), text: z.string(), cache_control: cacheControl });
const imageBlock = z.looseObject({
  type: z.literal('image'),
  source: z.discriminatedUnion('type', [
    z.looseObject({
      type: z.literal('base64'),
      media_type: z.string().max(100),
      data: z.string().max(20_000_000),
    }),
    z.looseObject({ type: z.literal('url'), url: z.string().max(20_000) }),
  ]),
  cache_control: cacheControl,
});
const toolUseBlock = z.looseObject({
  type: z.literal('tool_use'),
  id: z.string().min(1).max(256),
  name: z.string().min(1).max(64),
  input: z.record(z.string(), z.unknown()),
  cache_control: cacheControl,
});
const toolResultBlock = z.looseObject({
  type: z.literal('tool_result'),
  tool_use_id: z.string().min(1).max(256),
  content: z
    .union([z.string(), z.array(z.discriminatedUnion('type', [textBlock, imageBlock])).max(1_000)])
    .optional(),
  is_error: z.boolean().optional(),
  cache_control: cacheControl,
});
export const block = z.discriminatedUnion('type', [textBlock, imageBlock, toolUseBlock, toolResultBlock]);
export type Block = z.output<typeof block>;
export type ImageBlock = z.output<typeof imageBlock>;

// `system` turns inside `messages` (Claude Code sends its reminders so), text only: a system message at
// that place; one with `clear_at: "next_user_message"` only until a later user turn exists.
const message = z.discriminatedUnion('role', [
  z.looseObject({
    role: z.enum(['user', 'assistant']),
    content: z.union([z.string(), z.array(block).max(1_000)]),
  }),
  z.looseObject({
    role: z.literal('system'),
    content: z.union([z.string(), z.array(textBlock).max(1_000)]),
    clear_at: z.enum(['next_user_message', 'never']).nullish(),
  }),
]);

const tool = z.looseObject({
  type: z.literal('custom').optional(),
  name: z.string().min(1).max(64),
  description: z.string().optional(),
  input_schema: z.record(z.string(), z.unknown()),
  cache_control: cacheControl,
});

const toolChoice = z.discriminatedUnion('type', [
  z.looseObject({ type: z.enum(['auto', 'any']), disable_parallel_tool_use: z.boolean().optional() }),
  z.looseObject({ type: z.literal('none') }),
  z.looseObject({
    type: z.literal('tool'),
    name: z.string().min(1).max(64),
    disable_parallel_tool_use: z.boolean().optional(),
  }),
]);

export const messagesRequest = z.strictObject({
  model: z.string(),
  messages: z.array(message).min(1).max(10_000),
  system: z.union([z.string(), z.array(textBlock).max(1_000)]).optional(),
  max_tokens: z.number().int().positive(),
  tools: z.array(tool).max(128).optional(),
  tool_choice: toolChoice.optional(),
  stream: z.boolean().optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  stop_sequences: z.array(z.string().max(256)).max(4).optional(),
  // Read but never passed on: the provider gets svc's own opaque id of the acting user (as on chat).
  metadata: z.looseObject({ user_id: z.string().max(256).nullish() }).optional(),
  // Taken, not applied (above).
  thinking: z
    .looseObject({
      type: z.enum(['enabled', 'adaptive', 'between_tools', 'disabled']),
      budget_tokens: z.number().int().positive().optional(),
    })
    .optional(),
  output_config: z
    .strictObject({ effort: z.string().max(16).nullish(), task_budget: z.unknown().optional() })
    .optional(),
  context_management: z
    .looseObject({
      edits: z
        .array(z.looseObject({ type: z.string().max(64) }))
        .max(16)
        .optional(),
    })
    .optional(),
});
export type MessagesRequest = z.output<typeof messagesRequest>;

const ALLOWED = new Set(Object.keys(messagesRequest.shape));

/** 400 naming a parameter off the allow-list, else zod's 400. */
export function parseMessagesRequest(body: unknown): MessagesRequest {
  const unknown = firstUnknownKey(body, ALLOWED);
  if (unknown !== null)
    throw unsupportedParameterError({ param: unknown, why: 'is not supported by this server' });
  return parse(messagesRequest, body);
}
