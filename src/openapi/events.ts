import { z } from 'zod';
import { balanceAlertBody } from '../billing/alert-routes.js';
import {
  createdEndpointAnswer,
  deliveriesQuery,
  deliveryAnswer,
  endpointAnswer,
  endpointBody,
  endpointParams,
} from '../events/schema.js';
import { route } from './describe.js';

// The low-balance alert threshold and outbound events (webhook endpoints, their delivery log);
// docs/billing.md "Low-balance alerts" and "Outbound events".

const clientParams = z.object({ client_id: z.string().meta({ example: 'client_k3j9x2' }) });
const both = ['session', 'token'] as const;

const balanceAlert = z
  .object({ client_id: z.string(), threshold_credits: z.number().int().nullable() })
  .meta({ id: 'BalanceAlert' });

export const eventRoutes = [
  route('get', '/v1/clients/:client_id/balance-alert', {
    summary: "A client's low-balance alert threshold (owner)",
    auth: [...both],
    params: clientParams,
    response: balanceAlert,
    errors: [403],
  }),
  route('put', '/v1/clients/:client_id/balance-alert', {
    summary: "Set a client's low-balance alert threshold (owner; null: off)",
    description:
      'The owner is mailed, and the webhook endpoints get balance.low, when the balance falls from at least the threshold to below it, and balance.exhausted when it falls to 0; once per crossing, again after a top-up lifted it back.',
    auth: [...both],
    params: clientParams,
    body: balanceAlertBody,
    response: balanceAlert,
    errors: [403],
  }),
  route('get', '/v1/clients/:client_id/webhook-endpoints', {
    summary: "A client's webhook endpoints (owner)",
    auth: [...both],
    params: clientParams,
    response: z.object({ data: z.array(endpointAnswer) }),
    errors: [403],
  }),
  route('post', '/v1/clients/:client_id/webhook-endpoints', {
    summary: 'Register a webhook endpoint (owner); the answer shows its signing secret this once',
    auth: [...both],
    params: clientParams,
    body: endpointBody,
    response: createdEndpointAnswer,
    errors: [403, 409],
  }),
  route('delete', '/v1/clients/:client_id/webhook-endpoints/:endpoint_id', {
    summary: 'Delete a webhook endpoint and its delivery log (owner)',
    auth: [...both],
    params: endpointParams,
    response: z.object({ deleted: z.literal(true) }),
    errors: [403, 404],
  }),
  route('get', '/v1/clients/:client_id/webhook-endpoints/:endpoint_id/deliveries', {
    summary: "A webhook endpoint's delivery log, newest first (owner)",
    auth: [...both],
    params: endpointParams,
    query: deliveriesQuery,
    response: z.object({ data: z.array(deliveryAnswer) }),
    errors: [403, 404],
  }),
];
