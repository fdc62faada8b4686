import { z } from 'zod';
import { createServiceAccountBody, mintServiceAccountTokenBody } from '../service-accounts/schema.js';
import { tokenScopes } from './accounts.js';
import { route } from './describe.js';

// Service accounts (CONTRACT §11; docs/orgs-tokens-device.md "Service accounts").

const clientId = z.string().meta({ example: 'client_k3j9x2' });
const both = ['session', 'token'] as const;
const tags = ['Service accounts'];
const unixTime = z.number().int().meta({ description: 'Unix time, seconds' });
const params = z.object({ client_id: clientId });
const saParams = z.object({ client_id: clientId, sa_id: z.string().meta({ example: 'sa_k3j9x2' }) });

const serviceAccount = z.object({
  id: z.string().meta({ example: 'sa_k3j9x2' }),
  name: z.string(),
  role: z.enum(['member', 'viewer']),
  created_at: unixTime,
});

export const serviceAccountRoutes = [
  route('post', '/v1/clients/:client_id/service-accounts', {
    summary: 'Create a service account: a non-person principal of the client (owner)',
    tags,
    auth: [...both],
    params,
    body: createServiceAccountBody,
    response: serviceAccount.meta({ id: 'ServiceAccount' }),
    errors: [403, 404],
  }),
  route('get', '/v1/clients/:client_id/service-accounts', {
    summary: "The client's service accounts, each with its active credential (owner)",
    tags,
    auth: [...both],
    params,
    response: z.object({
      data: z.array(
        serviceAccount.extend({
          credential: z
            .object({
              token_id: z.number().int(),
              token_prefix: z.string(),
              expires_at: unixTime.nullable(),
              scopes: tokenScopes,
              last_used_at: unixTime.nullable(),
            })
            .nullable(),
        }),
      ),
    }),
    errors: [403, 404],
  }),
  route('delete', '/v1/clients/:client_id/service-accounts/:sa_id', {
    summary: 'Delete a service account; its credential is revoked at once (owner)',
    tags,
    auth: [...both],
    params: saParams,
    response: z.object({ deleted: z.literal(true) }),
    errors: [403, 404],
  }),
  route('post', '/v1/clients/:client_id/service-accounts/:sa_id/tokens', {
    summary: "Mint the service account's credential; the previous one is revoked (owner; secret shown once)",
    tags,
    auth: [...both],
    params: saParams,
    body: mintServiceAccountTokenBody,
    response: z.object({
      id: z.number().int(),
      client_id: z.string().meta({ example: 'org_k3j9x2' }),
      token_name: z.string(),
      token: z.string().meta({ example: 'svc_…' }),
      created_at: unixTime,
      expires_at: unixTime.nullable(),
      scopes: tokenScopes,
    }),
    errors: [403, 404],
  }),
];
