import { z } from 'zod';
import { autoTopupBody } from '../billing/auto-topup-routes.js';
import { route } from './describe.js';

// Auto top-up (docs/billing.md, "Auto top-up").

const clientId = z.string().meta({ example: 'client_k3j9x2' });
const both = ['session', 'token'] as const;
const tags = ['Billing'];
const params = z.object({ client_id: clientId });

const settings = z
  .object({
    client_id: clientId,
    enabled: z.boolean(),
    trigger_credits: z.number().int().optional(),
    amount_usd: z.number().int().optional().meta({ description: 'Cents charged each time' }),
    monthly_cap_usd: z.number().int().optional().meta({ description: 'At most this many cents a UTC month' }),
    disabled_reason: z.string().nullable().optional(),
    charged_this_month_usd: z.number().int().optional(),
  })
  .meta({ id: 'AutoTopup' });

export const autoTopupRoutes = [
  route('get', '/v1/clients/:client_id/auto-topup', {
    summary: "A client's auto top-up settings and this month's charges (members)",
    tags,
    auth: [...both],
    params,
    response: settings,
    errors: [403, 404],
  }),
  route('put', '/v1/clients/:client_id/auto-topup', {
    summary:
      'Opt in to auto top-up: charge the saved card off-session when the balance falls below the trigger (owner)',
    tags,
    auth: [...both],
    params,
    body: autoTopupBody,
    response: settings,
    errors: [400, 403, 404],
  }),
  route('delete', '/v1/clients/:client_id/auto-topup', {
    summary: 'Opt out of auto top-up (owner)',
    tags,
    auth: [...both],
    params,
    response: settings,
    errors: [403, 404],
  }),
];
