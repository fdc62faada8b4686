import { z } from 'zod';
import { chatRequest } from '../models/schema.js';
import { responsesRequest } from '../models/front-ends/responses/schema.js';
import { messagesRequest } from '../models/front-ends/messages/schema.js';
import { ORG_HEADER } from '../models/admission/actor.js';
import { route } from './describe.js';
import { runFrameCodes } from './error-codes.js';

// The OpenAI-compatible model routes (CONTRACT §9). A call spends credits: an svc_ token or a model
// grant; the catalog and agents also take a session. Errors are OpenAI-shaped.

const spenders = ['token', 'modelGrant'] as const;
const orgHeader = z.object({
  [ORG_HEADER]: z
    .string()
    .optional()
    .meta({ description: 'The organization to act for (an id it may act for, CONTRACT §7)' }),
});
const orgQuery = z.object({
  org_id: z.string().optional().meta({ description: 'Must name the acting organization' }),
});

const model = z
  .object({ id: z.string(), object: z.literal('model'), created: z.number().int(), owned_by: z.string() })
  .meta({
    id: 'Model',
    example: { id: 'gpt-4o-mini', object: 'model', created: 1767225600, owned_by: 'svc' },
  });

const completion = z
  .looseObject({
    id: z.string(),
    object: z.literal('chat.completion'),
    created: z.number().int(),
    model: z.string(),
    choices: z.array(
      z.looseObject({
        index: z.number().int(),
        message: z.looseObject({ role: z.string(), content: z.string().nullable().optional() }),
        finish_reason: z.string().nullable(),
      }),
    ),
    usage: z
      .looseObject({
        prompt_tokens: z.number().int(),
        completion_tokens: z.number().int(),
        total_tokens: z.number().int(),
      })
      .optional(),
  })
  .meta({ id: 'ChatCompletion' });

const responseObject = z
  .looseObject({
    id: z.string(),
    object: z.literal('response'),
    created_at: z.number().int(),
    status: z.enum(['completed', 'incomplete', 'failed', 'in_progress']),
    model: z.string(),
    output: z.array(z.looseObject({ type: z.string(), id: z.string() })),
    usage: z
      .looseObject({
        input_tokens: z.number().int(),
        output_tokens: z.number().int(),
        total_tokens: z.number().int(),
      })
      .nullable(),
  })
  .meta({ id: 'Response' });

export const modelRoutes = [
  route('post', '/v1/chat/completions', {
    summary: 'Chat completion through the model provider, debited exactly in credits',
    description:
      'OpenAI-compatible. `stream: true` answers Server-Sent Events (`data: {chunk}` … `data: [DONE]`). ' +
      'The call holds credits up front and settles what was used (CONTRACT §9).',
    auth: [...spenders],
    headers: orgHeader,
    query: orgQuery,
    body: chatRequest,
    response: {
      '200': {
        description: 'The completion (JSON), or with stream: true a text/event-stream of chunks',
        content: {
          'application/json': { schema: completion },
          'text/event-stream': { schema: z.string() },
        },
      },
    },
    errors: [402, 403, 404, 413, 429, 503],
  }),
  route('post', '/v1/responses', {
    summary: 'OpenAI Responses API: the same model call as chat, debited exactly in credits',
    description:
      'Translated to a chat completion (docs/models.md "POST /v1/responses"). `stream: true` answers the ' +
      'Responses event stream (`event: response.created` … `response.completed` with usage). With ' +
      '`store` (the default) the response is kept 30 days for GET, DELETE and `previous_response_id`, ' +
      'within the acting organization only.',
    auth: [...spenders],
    headers: orgHeader,
    query: orgQuery,
    body: responsesRequest,
    response: {
      '200': {
        description: 'The Response (JSON), or with stream: true a text/event-stream of Responses events',
        content: {
          'application/json': { schema: responseObject },
          'text/event-stream': { schema: z.string() },
        },
      },
    },
    errors: [402, 403, 404, 413, 429, 503],
  }),
  route('post', '/v1/messages', {
    summary: 'Anthropic Messages API: the same model call as chat, debited exactly in credits',
    description:
      'Translated to a chat completion (docs/models.md "POST /v1/messages"). The key goes in `x-api-key` ' +
      'or as a bearer. `stream: true` answers the Messages event stream (`message_start` … ' +
      "`message_delta` with usage, `message_stop`). Errors take Anthropic's shape.",
    auth: [...spenders],
    headers: orgHeader,
    body: messagesRequest,
    response: {
      '200': {
        description: 'The message (JSON), or with stream: true a text/event-stream of Messages events',
        content: {
          'application/json': {
            schema: z.looseObject({
              id: z.string(),
              type: z.literal('message'),
              role: z.literal('assistant'),
              content: z.array(z.looseObject({ type: z.string() })),
              stop_reason: z.string().nullable(),
              usage: z.looseObject({ input_tokens: z.number().int(), output_tokens: z.number().int() }),
            }),
          },
          'text/event-stream': { schema: z.string() },
        },
      },
    },
    errors: [402, 403, 413, 429, 503],
  }),
  route('get', '/v1/responses/:id', {
    summary: 'A stored response of the acting organization',
    auth: [...spenders],
    headers: orgHeader,
    params: z.object({ id: z.string() }),
    response: responseObject,
    errors: [403, 404],
  }),
  route('delete', '/v1/responses/:id', {
    summary:
      'Deletes a stored response of the acting organization (a member who can spend; a viewer: 403 NO_ACCESS)',
    auth: [...spenders],
    headers: orgHeader,
    params: z.object({ id: z.string() }),
    response: z.object({ id: z.string(), object: z.literal('response'), deleted: z.literal(true) }),
    errors: [403, 404],
  }),
  route('get', '/v1/models', {
    summary: 'The model catalog',
    auth: ['session', ...spenders],
    headers: orgHeader,
    response: z.object({ object: z.literal('list'), data: z.array(model) }),
    errors: [403],
  }),
  route('get', '/v1/models/:id', {
    summary: 'One model',
    auth: ['session', ...spenders],
    headers: orgHeader,
    response: model,
    errors: [403, 404],
  }),
  route('get', '/v1/agents', {
    summary: 'The agents a run can use, with their tools',
    auth: ['session', ...spenders],
    headers: orgHeader,
    query: orgQuery,
    response: z.object({
      data: z.array(
        z.object({
          name: z.string(),
          description: z.string(),
          tools: z.array(z.object({ name: z.string(), description: z.string(), parameters: z.unknown() })),
        }),
      ),
    }),
    errors: [403],
  }),
  route('get', '/v1/runs/ws', {
    summary: 'The run socket (WebSocket): runs an agent, streaming its frames',
    description:
      'A plain GET answers 426 with Upgrade: websocket. See docs/models.md for the frames. ' +
      `An \`error\` frame ends a run; its codes: ${runFrameCodes()}.`,
    auth: [...spenders],
    response: { '101': { description: 'Switching to WebSocket' } },
    errors: [426],
  }),
];
