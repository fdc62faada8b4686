import { z } from 'zod';
import { orgKeyField } from '../orgs/schema.js';
import { orgIdOf, unix } from '../ids.js';
import type { ApiTokenRow } from './service.js';

// Inputs and outputs of the API-token routes (interface document: Tokens; CONTRACT §6). Outputs are
// shaped here so the hash never leaves by accident; token payloads spell the org `org_…` (CONTRACT §2).

export const DEFAULT_TOKEN_NAME = 'API key';

export const TOKEN_SCOPES = ['model', 'account'] as const;
export type TokenScope = (typeof TOKEN_SCOPES)[number];

/** The longest a credential may live (CONTRACT §6 "Credential options"). */
export const MAX_TOKEN_LIFETIME_SECONDS = 400 * 24 * 3600;

/**
 * The options of every `svc_` mint (CONTRACT §6): `expires_at` in Unix seconds, in the future and at
 * most 400 days away; `scopes` a non-empty subset of model and account (default both).
 */
export const credentialOptions = {
  expires_at: z
    .number()
    .int()
    .refine((at) => at > Date.now() / 1000, 'must be in the future')
    .refine((at) => at <= Date.now() / 1000 + MAX_TOKEN_LIFETIME_SECONDS, 'must be at most 400 days away')
    .nullish(),
  scopes: z
    .array(z.enum(TOKEN_SCOPES))
    .min(1)
    .refine((s) => new Set(s).size === s.length, 'must not repeat a scope')
    .optional(),
};

/** The stored form of the options: the expiry as a Date (or null), the scopes in a fixed order. */
export function credentialOptionsOf(body: { expires_at?: number | null; scopes?: TokenScope[] }) {
  return {
    expiresAt: body.expires_at == null ? null : new Date(body.expires_at * 1000),
    scopes: TOKEN_SCOPES.filter((s) => (body.scopes ?? TOKEN_SCOPES).includes(s)),
  };
}

export const mintBody = z.object({
  token_name: z.string().trim().min(1).max(100).optional(),
  client_id: orgKeyField.optional(),
  ...credentialOptions,
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
  expires_at: unix(row.expiresAt),
  scopes: row.scopes,
});

/** The answer to a mint (CONTRACT §6, §11): the only time the secret is shown. */
export const mintedTokenJson = (row: ApiTokenRow, secret: string) => ({
  id: row.id,
  client_id: orgIdOf(row.orgId),
  token_name: row.tokenName,
  token: secret,
  created_at: unix(row.createdAt),
  expires_at: unix(row.expiresAt),
  scopes: row.scopes,
});
