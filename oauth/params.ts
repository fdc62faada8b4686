import { AppError } from '../src/http/errors.js';
import { OAUTH_RESOURCES, type OAuthResource } from '../src/db/schema.js';
import { ACCOUNT_SCOPE, resourceFromUrl } from './resources.js';
import { BUILTIN_CLI_CLIENT_ID } from '../src/ids.js';
import { OAUTH_ERRORS, type OAuthErrorCode } from './errors.js';

// Request parameters shared by the authorization, device and token endpoints.

/**
 * A protocol error: a code of the authorization server's catalogue (oauth/errors.ts), with its status.
 * It is an AppError, so the error middleware renders it on /oauth/* as {error, error_description};
 * invalid_client is 401 with WWW-Authenticate (RFC 6749 §5.2).
 */
export class OAuthProtocolError extends AppError {
  constructor(error: OAuthErrorCode, description: string) {
    const { status } = OAUTH_ERRORS[error];
    super(
      status,
      error,
      description,
      status === 401 ? { headers: { 'WWW-Authenticate': 'Basic realm="svc", charset="UTF-8"' } } : {},
    );
  }
  get error(): string {
    return this.code;
  }
}

/** Every value of a possibly repeated parameter (the query and form parsers give a string or an array). */
export function allValues(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  const list = Array.isArray(value) ? value : [value];
  return list.filter((v): v is string => typeof v === 'string');
}

/** A single-valued parameter: repeated is a malformed request (RFC 6749 §3.1 "MUST NOT be included more than once"). */
export function singleValue(value: unknown, name: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw new OAuthProtocolError('invalid_request', `${name} must be sent once`);
  return value;
}

/**
 * RFC 8707 `resource` values (repeatable) → our resources on this origin. None named means both
 * (CONTRACT §7 "none = both"); any value that is not one of this origin's resources is invalid_target.
 */
export function parseResources(origin: string, value: unknown): OAuthResource[] | null {
  const values = allValues(value);
  if (values.length === 0) return null;
  const out = new Set<OAuthResource>();
  for (const v of values) {
    const r = resourceFromUrl(origin, v);
    if (!r)
      throw new OAuthProtocolError(
        'invalid_target',
        `resource ${JSON.stringify(v.slice(0, 200))} is not served by this issuer`,
      );
    out.add(r);
  }
  return OAUTH_RESOURCES.filter((r) => out.has(r));
}

/** The scopes a request may name, and the resource each is for (CONTRACT §7). */
const SCOPE_RESOURCE: Record<string, OAuthResource> = {
  model: 'model',
  platform: 'platform',
  'platform:read': 'platform',
  // `account` rides on the model resource ({origin}/v1): reads of the /v1 account routes (CONTRACT §7).
  [ACCOUNT_SCOPE]: 'model',
};

/**
 * Scope values that name resources; `offline_access` is tolerated (refresh tokens are always issued).
 * `platform:read` names the platform resource, read-only (CONTRACT §10).
 */
export function parseScope(value: unknown): OAuthResource[] | null {
  const s = singleValue(value, 'scope');
  if (s === undefined || s.trim() === '') return null;
  const out = new Set<OAuthResource>();
  for (const item of s.split(' ').filter(Boolean)) {
    if (item === 'offline_access') continue;
    const resource = SCOPE_RESOURCE[item];
    if (!resource)
      throw new OAuthProtocolError('invalid_scope', `unknown scope ${JSON.stringify(item.slice(0, 100))}`);
    out.add(resource);
  }
  return out.size ? OAUTH_RESOURCES.filter((r) => out.has(r)) : null;
}

/**
 * The scope a grant of `resource` carries, given the scope the request asked for: `platform:read` when
 * the request named it and not `platform` as well (asking for both is asking for all), else the
 * resource's own scope.
 */
export function grantScopeOf(resource: OAuthResource, requested: string | null | undefined): string {
  const items = requested?.split(' ') ?? [];
  if (resource === 'platform' && items.includes('platform:read') && !items.includes('platform'))
    return 'platform:read';
  // `account` beside `model`, or alone: then the grant reads the account routes and calls no model.
  if (resource === 'model' && items.includes(ACCOUNT_SCOPE))
    return items.includes('model') ? `model ${ACCOUNT_SCOPE}` : ACCOUNT_SCOPE;
  return resource;
}

/**
 * What an approval grants, one scope per resource (stored on the code or device code until issuance).
 * The built-in svc-cli asks for `account` by default: without a scope parameter its /v1 grant carries
 * it; any other client gets `account` only when its scope names it (CONTRACT §7).
 */
export function approvalScope(
  resources: readonly OAuthResource[],
  query: { scope?: unknown },
  clientId?: string,
): string {
  const asked = singleValue(query.scope, 'scope');
  const requested = !asked?.trim() && clientId === BUILTIN_CLI_CLIENT_ID ? `model ${ACCOUNT_SCOPE}` : asked;
  return resources.map((r) => grantScopeOf(r, requested)).join(' ');
}

/** The resources an authorization or device request asks for: resources narrowed by scope. */
export function requestedResources(
  origin: string,
  query: { resource?: unknown; scope?: unknown },
): OAuthResource[] {
  const byResource = parseResources(origin, query.resource) ?? [...OAUTH_RESOURCES];
  const byScope = parseScope(query.scope);
  const chosen = byScope ? byResource.filter((r) => byScope.includes(r)) : byResource;
  if (chosen.length === 0)
    throw new OAuthProtocolError('invalid_scope', 'the scope names none of the requested resources');
  return chosen;
}

/**
 * The `resource` of a token request (RFC 8707 §2.2) names which approved grant the response's top level
 * carries; the response still lists a grant per approved resource (CONTRACT §7: the top-level tokens are
 * "for the resource named in the token request", `grants` has "one entry per approved resource"). A
 * resource that was not approved is `invalid_target`. Returns the named resources, null when none.
 */
export function namedAmongApproved(
  origin: string,
  value: unknown,
  approved: readonly OAuthResource[],
): OAuthResource[] | null {
  const named = parseResources(origin, value);
  for (const r of named ?? []) {
    if (!approved.includes(r))
      throw new OAuthProtocolError('invalid_target', `the resource ${r} was not approved for this grant`);
  }
  return named;
}
