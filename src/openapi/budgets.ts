import { z } from 'zod';
import { budgetBody } from '../billing/budget-routes.js';
import { route } from './describe.js';

// Member budgets (docs/billing.md, "Member budgets").

const clientId = z.string().meta({ example: 'client_k3j9x2' });
const both = ['session', 'token'] as const;
const tags = ['Billing'];

export const budget = z
  .object({
    client_id: clientId,
    user_id: z.string(),
    token_id: z
      .number()
      .int()
      .nullable()
      .meta({ description: "Set: the budget of this svc_ token; null: the member's" }),
    period: z.enum(['day', 'week', 'month']),
    budget_credits: z.number().int(),
    spent_credits: z
      .number()
      .int()
      .meta({ description: 'This period: what settled calls debited plus what calls in flight hold' }),
    remaining_credits: z.number().int(),
    period_start: z
      .number()
      .int()
      .meta({ description: 'Unix seconds, a UTC day, ISO week (Monday) or month start' }),
    period_end: z.number().int().meta({ description: 'Unix seconds: the budget resets here' }),
  })
  .meta({ id: 'MemberBudget' });

const memberParams = z.object({ client_id: clientId, user_id: z.string() });
const tokenParams = z.object({ client_id: clientId, token_id: z.number().int() });
const removed = z.object({ removed: z.literal(true) });

export const budgetRoutes = [
  route('get', '/v1/clients/:client_id/budget', {
    summary: "The caller's own budgets in a client: theirs as a member and their tokens'",
    tags,
    auth: [...both],
    params: z.object({ client_id: clientId }),
    response: z.object({
      client_id: clientId,
      user_id: z.string(),
      budget: budget.nullable(),
      token_budgets: z.array(budget),
    }),
    errors: [403, 404],
  }),
  route('get', '/v1/clients/:client_id/budgets', {
    summary: "Every member and token budget of a client, with this period's use (owner)",
    tags,
    auth: [...both],
    params: z.object({ client_id: clientId }),
    response: z.object({ data: z.array(budget) }),
    errors: [403, 404],
  }),
  route('put', '/v1/clients/:client_id/members/:user_id/budget', {
    summary: "Set a member's budget per period (owner); calls beyond it get 402 member_budget_exhausted",
    tags,
    auth: [...both],
    params: memberParams,
    body: budgetBody,
    response: budget,
    errors: [400, 403, 404],
  }),
  route('delete', '/v1/clients/:client_id/members/:user_id/budget', {
    summary: "Clear a member's budget (owner)",
    tags,
    auth: [...both],
    params: memberParams,
    response: removed,
    errors: [403, 404],
  }),
  route('put', '/v1/clients/:client_id/tokens/:token_id/budget', {
    summary: "Set the budget of one of a member's svc_ tokens (owner), on top of the member's",
    tags,
    auth: [...both],
    params: tokenParams,
    body: budgetBody,
    response: budget,
    errors: [400, 403, 404],
  }),
  route('delete', '/v1/clients/:client_id/tokens/:token_id/budget', {
    summary: "Clear a token's budget (owner)",
    tags,
    auth: [...both],
    params: tokenParams,
    response: removed,
    errors: [403, 404],
  }),
];
