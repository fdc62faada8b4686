import { z } from 'zod';
import { unix } from '../ids.js';
import { credentialOptions } from '../tokens/schema.js';
import type { ApiTokenRow } from '../tokens/service.js';
import type { ServiceAccountRow } from './service.js';

// Inputs and outputs of the service-account routes (CONTRACT §11).

export const createServiceAccountBody = z.object({
  name: z.string().trim().min(1).max(100),
  role: z.enum(['member', 'viewer']).default('member'),
});

export const mintServiceAccountTokenBody = z.object({
  token_name: z.string().trim().min(1).max(100).optional(),
  ...credentialOptions,
});

export const serviceAccountIdParam = z.string().regex(/^sa_[a-z0-9]{1,64}$/);

export const DEFAULT_SERVICE_ACCOUNT_TOKEN_NAME = 'Service account key';

export const serviceAccountJson = (sa: ServiceAccountRow) => ({
  id: sa.id,
  name: sa.name,
  role: sa.role,
  created_at: unix(sa.createdAt),
});

export const serviceAccountCredentialJson = (t: ApiTokenRow) => ({
  token_id: t.id,
  token_prefix: t.tokenPrefix,
  expires_at: unix(t.expiresAt),
  scopes: t.scopes,
  last_used_at: unix(t.lastUsedAt),
});
