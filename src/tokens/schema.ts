import { z } from 'zod';
import { orgKeyField } from '../orgs/schema.js';
import { orgIdOf, unix } from '../ids.js';
import type { ApiTokenRow } from './service.js';

// Inputs and outputs of the API-token routes (interface document: Tokens; CONTRACT §6). Outputs are
// shaped here so the hash never leaves by accident; token payloads spell the org `org_…` (CONTRACT §2).

export const DEFAULT_TOKEN_NAME = 'API key';

export const mintBody = z.object({
  token_name: z.string().trim().min(1).max(100).optional(),
  client_id: orgKeyField.optional(),
});

/** Serial ids are int4: anything outside is unknown, and must not reach the database as a 500. */
export const revokeBody = z.object({ id: z.number().int().positive().max(2_147_483_647) });

export const tokenListItem = (row: ApiTokenRow) => ({
  id: row.id,
  client_id: orgIdOf(row.orgId),
  token_name: row.tokenName,
  token_prefix: row.tokenPrefix,
  created_at: unix(row.createdAt),
  last_used_at: unix(row.lastUsedAt),
  revoked_at: unix(row.revokedAt),
});
