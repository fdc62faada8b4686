import { z } from 'zod';
import { pageFields } from '../http/pagination.js';
import { EVENT_TYPES } from './types.js';

// Request and answer shapes of the webhook endpoint routes (src/events/routes.ts; src/openapi/events.ts).

export const MAX_ENDPOINTS_PER_CLIENT = 16;

export const endpointBody = z.object({
  url: z
    .url({ protocol: /^https?$/ })
    .max(2000)
    .meta({ description: 'https (http too in DEV_MODE); no user name, password or fragment' }),
  events: z
    .array(z.enum(EVENT_TYPES))
    .min(1)
    .max(EVENT_TYPES.length)
    .refine((e) => new Set(e).size === e.length, 'each event type once'),
});

export const endpointParams = z.object({
  client_id: z.string().meta({ example: 'client_k3j9x2' }),
  endpoint_id: z.string().max(64).meta({ example: 'we_2kq8w0c4m1x7z5n3b6v9d1f8gh' }),
});

export const deliveriesQuery = z.object(pageFields);

export const endpointAnswer = z
  .object({
    id: z.string(),
    client_id: z.string(),
    url: z.string(),
    events: z.array(z.enum(EVENT_TYPES)),
    created_at: z.number().int(),
  })
  .meta({ id: 'WebhookEndpoint' });

export const createdEndpointAnswer = endpointAnswer
  .extend({
    secret: z.string().meta({
      description:
        'The signing secret (whsec_…), shown this once: svc keeps it sealed and cannot show it again',
    }),
  })
  .meta({ id: 'WebhookEndpointCreated' });

export const deliveryAnswer = z
  .object({
    id: z.number().int(),
    endpoint_id: z.string(),
    event_id: z.string(),
    event_type: z.enum(EVENT_TYPES),
    status: z.enum(['pending', 'delivered', 'failed']),
    attempts: z.number().int(),
    last_status_code: z.number().int().nullable(),
    last_error: z.string().nullable(),
    next_attempt_at: z.number().int().nullable(),
    delivered_at: z.number().int().nullable(),
    created_at: z.number().int(),
  })
  .meta({ id: 'WebhookDelivery' });
