import { z } from 'zod';

// zod shapes of the model routes' inputs. The chat request is an OpenAI request passed through: the
// fields the proxy acts on are checked, every other field goes to the provider unchanged (looseObject).

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

export const chatRequest = z
  .looseObject({
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
  })
  // As OpenAI answers it: stream options without a stream are a mistake (400, param stream_options), not
  // silently dropped.
  .refine((r) => r.stream_options == null || r.stream === true, {
    path: ['stream_options'],
    message: "stream_options is only allowed when 'stream' is true",
  });

export type ChatRequest = z.output<typeof chatRequest>;

export const orgQuery = z.object({ org_id: z.string().max(100).optional() }).loose();
