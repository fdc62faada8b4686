import { z } from 'zod';
import { callsQuery, summaryQuery } from '../usage/routes.js';
import { route } from './describe.js';

// The usage API (docs/usage.md): where an organization's tokens went. format=csv answers text/csv.

const clientId = z.string().meta({ example: 'client_k3j9x2' });
const clientParams = z.object({ client_id: clientId });
const both = ['session', 'token'] as const;

// Two amounts that a reader must not take for each other (decision record 0075): what the calls cost
// svc at the provider's price, and what the organization was charged in svc tokens.
const COMPUTE_COST =
  "The compute cost: what the calls cost at the provider's model prices, in US cents, as an exact decimal string. Not the charge: the charge is credits_debited (svc tokens, 1,000 tokens = $1.00 at par). The usage CSVs name this column compute_cost_cents.";
const CREDITS_DEBITED =
  'svc tokens debited for the calls: the charge. Its money at par is credits_debited / 1000 US dollars (920 tokens · $0.92); the usage CSVs carry it as debited_usd.';

const totals = z.object({
  calls: z.number().int(),
  prompt_tokens: z.number().int(),
  completion_tokens: z.number().int(),
  cached_prompt_tokens: z.number().int().meta({
    description:
      "Of prompt_tokens, those served from the provider's cache (priced at MODEL_PRICE_CACHED_INPUT)",
  }),
  credits_debited: z.number().int().meta({ description: CREDITS_DEBITED }),
  cost_cents: z.string().meta({ description: COMPUTE_COST, example: '12.6' }),
});

const call = z
  .object({
    id: z.string(),
    created_at: z.number().int(),
    user_id: z.string(),
    email: z.string().nullable(),
    credential: z.union([
      z.object({
        type: z.literal('api_token'),
        token_id: z.number().int(),
        token_name: z.string().nullable(),
      }),
      z.object({
        type: z.literal('oauth_grant'),
        grant_id: z.string(),
        client_id: z.string().nullable(),
        client_name: z.string().nullable(),
      }),
    ]),
    source: z.string(),
    run_id: z.string().nullable(),
    model: z.string(),
    prompt_tokens: z.number().int(),
    completion_tokens: z.number().int(),
    cached_prompt_tokens: z.number().int().meta({
      description:
        "Of prompt_tokens, those served from the provider's cache (priced at MODEL_PRICE_CACHED_INPUT)",
    }),
    cost_cents: z.string().meta({ description: COMPUTE_COST, example: '2.07' }),
    credits_debited: z.number().int().meta({ description: CREDITS_DEBITED }),
    duration_ms: z.number().int(),
    outcome: z.string(),
  })
  .meta({ id: 'UsageCall' });

const csv = { 'text/csv': { schema: z.string() } };

export const usageRoutes = [
  route('get', '/v1/clients/:client_id/usage', {
    summary: 'Usage totals per day, member, credential or model, and overall (viewers: day and model)',
    auth: [...both, 'accountGrant'],
    params: clientParams,
    query: summaryQuery,
    response: {
      '200': {
        description: 'Totals (JSON, or CSV with format=csv)',
        content: {
          'application/json': {
            schema: z.object({
              client_id: clientId,
              from: z.number().int(),
              to: z.number().int(),
              group_by: z.string(),
              data: z.array(totals.extend({ key: z.string(), label: z.string() })),
              totals,
            }),
          },
          ...csv,
        },
      },
    },
    errors: [403],
  }),
  route('get', '/v1/clients/:client_id/usage/calls', {
    summary: 'The call log, newest first (not for viewers)',
    auth: [...both, 'accountGrant'],
    params: clientParams,
    query: callsQuery,
    response: {
      '200': {
        description: 'Calls (JSON, or CSV with format=csv)',
        content: {
          'application/json': {
            schema: z.object({
              client_id: clientId,
              from: z.number().int(),
              to: z.number().int(),
              data: z.array(call),
            }),
          },
          ...csv,
        },
      },
    },
    errors: [403],
  }),
];
