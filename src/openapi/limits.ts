import { z } from 'zod';
import { limitsBody } from '../ratelimit/limit-settings.js';
import { route } from './describe.js';

// RPM and TPM limits per organization and per credential (CONTRACT §11; docs/models.md "Rate limits").

const clientId = z.string().meta({ example: 'client_k3j9x2' });
const both = ['session', 'token'] as const;
const tags = ['Rate limits'];
const limit = z.number().int().nullable().meta({ description: 'Per rolling minute; null: none' });
const orgLimits = z.object({ client_id: clientId, rpm: limit, tpm: limit });
const tokenLimits = orgLimits.extend({ token_id: z.number().int() });
const params = z.object({ client_id: clientId });
const tokenParams = z.object({ client_id: clientId, token_id: z.number().int() });

export const limitRoutes = [
  route('get', '/v1/clients/:client_id/limits', {
    summary: "The client's RPM and TPM limits (owner and members)",
    tags,
    auth: [...both],
    params,
    response: orgLimits,
    errors: [403, 404],
  }),
  route('put', '/v1/clients/:client_id/limits', {
    summary: "Set the client's RPM and TPM limits (owner; null removes one)",
    tags,
    auth: [...both],
    params,
    body: limitsBody,
    response: orgLimits,
    errors: [403, 404],
  }),
  route('get', '/v1/clients/:client_id/tokens/:token_id/limits', {
    summary: "One credential's RPM and TPM limits (owner and members)",
    tags,
    auth: [...both],
    params: tokenParams,
    response: tokenLimits,
    errors: [403, 404],
  }),
  route('put', '/v1/clients/:client_id/tokens/:token_id/limits', {
    summary: "Set one credential's RPM and TPM limits (owner; null removes one)",
    tags,
    auth: [...both],
    params: tokenParams,
    body: limitsBody,
    response: tokenLimits,
    errors: [403, 404],
  }),
];
