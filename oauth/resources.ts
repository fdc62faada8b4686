import type { OAuthResource } from '../src/db/schema.js';

// The two protected resources of every origin (CONTRACT §7): platform `{origin}/mcp/platform` (scope
// `platform`) and model `{origin}/v1` (scope `model`).

export const RESOURCE_PATHS: Record<OAuthResource, string> = { platform: '/mcp/platform', model: '/v1' };

export const resourceUrl = (origin: string, resource: OAuthResource): string =>
  `${origin}${RESOURCE_PATHS[resource]}`;

/** Which resource an RFC 8707 `resource` value names on this origin, or null (→ invalid_target). */
export function resourceFromUrl(origin: string, value: string): OAuthResource | null {
  // Byte-exact, with one allowance: a trailing slash some clients add (`{origin}/v1/`).
  const v = value.endsWith('/') ? value.slice(0, -1) : value;
  if (v === resourceUrl(origin, 'platform')) return 'platform';
  if (v === resourceUrl(origin, 'model')) return 'model';
  return null;
}

/** The protected-resource metadata URL of a resource (RFC 9728 §3.1: path inserted after the well-known). */
export const resourceMetadataUrl = (origin: string, resource: OAuthResource): string =>
  `${origin}/.well-known/oauth-protected-resource${RESOURCE_PATHS[resource]}`;

/**
 * Scope `account` (CONTRACT §7) rides on the model resource (`{origin}/v1`): that grant may then READ the
 * /v1 account routes (verify, clients, balances, billing, usage) under the caller's role rules.
 */
export const ACCOUNT_SCOPE = 'account';

/** How the consent and device pages name scope `account` (CONTRACT §7). */
export const ACCOUNT_SCOPE_TEXT = {
  title: 'Read your organizations, balances and usage',
  text: 'Read who you are, the organizations you belong to, their balances, transactions and usage (/v1). It cannot change anything.',
};
