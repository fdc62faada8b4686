import type { Deps } from '../src/deps.js';
import type { OAuthResource } from '../src/db/schema.js';
import { findClient, redirectUriAllowed, type OAuthClient } from './clients.js';
import { approvalScope, OAuthProtocolError, requestedResources, singleValue } from './params.js';

// Validation of an authorization request (RFC 6749 §4.1.1, RFC 7636, RFC 8707, RFC 9207), in the order
// RFC 9700 asks for: until the client and its redirect URI are established nothing is redirected (an
// unknown client or a mismatched redirect_uri gets an error page, never a redirect: §4.1 / open
// redirector §4.11); after that, every error goes back to the client with `state` and `iss` — once the
// person is signed in, or for svc-cli (CONTRACT §7; the caller decides: oauth/authorize.ts).

export interface AuthorizationRequest {
  client: OAuthClient;
  redirectUri: string;
  state: string | undefined;
  codeChallenge: string;
  resources: OAuthResource[];
  /** What an approval grants, one scope per resource (oauth/params.ts approvalScope). */
  scope: string;
}

export type Validated =
  | { kind: 'ok'; request: AuthorizationRequest }
  | { kind: 'page'; status: number; message: string }
  | { kind: 'redirect'; location: string; client: OAuthClient; description: string };

/** The client's redirect URI with the response parameters added, `iss` always (RFC 9207 §2). */
export function redirectWith(
  redirectUri: string,
  params: Record<string, string | undefined>,
  issuer: string,
): string {
  const url = new URL(redirectUri);
  for (const [k, v] of Object.entries(params)) if (v !== undefined) url.searchParams.append(k, v);
  url.searchParams.append('iss', issuer);
  return url.toString();
}

const CODE_CHALLENGE = /^[A-Za-z0-9_-]{43}$/; // base64url of a SHA-256 digest (RFC 7636 §4.2)

export async function validateAuthorizationRequest(
  deps: Deps,
  origin: string,
  query: Record<string, unknown>,
): Promise<Validated> {
  let clientId: string | undefined;
  let redirectUri: string | undefined;
  let state: string | undefined;
  try {
    clientId = singleValue(query.client_id, 'client_id');
    redirectUri = singleValue(query.redirect_uri, 'redirect_uri');
    state = singleValue(query.state, 'state');
  } catch {
    return { kind: 'page', status: 400, message: 'The request repeats client_id, redirect_uri or state.' };
  }
  if (!clientId)
    return {
      kind: 'page',
      status: 400,
      message: 'The request does not name a client (client_id is missing).',
    };
  const client = await findClient(deps, clientId);
  if (!client)
    return { kind: 'page', status: 400, message: 'The application that sent you here is not known to svc.' };
  if (!redirectUri || !redirectUriAllowed(client, redirectUri)) {
    return {
      kind: 'page',
      status: 400,
      message:
        'The application asked to send you to an address it has not registered, so svc will not send you there.',
    };
  }

  const fail = (error: string, description: string): Validated => ({
    kind: 'redirect',
    location: redirectWith(redirectUri, { error, error_description: description, state }, origin),
    client,
    description,
  });
  try {
    const responseType = singleValue(query.response_type, 'response_type');
    if (responseType !== 'code')
      return fail('unsupported_response_type', 'only response_type=code is supported');
    if (!client.grantTypes.includes('authorization_code'))
      return fail('unauthorized_client', 'this client may not use the authorization code grant');
    const challenge = singleValue(query.code_challenge, 'code_challenge');
    const method = singleValue(query.code_challenge_method, 'code_challenge_method');
    // PKCE is required, S256 only (OAuth 2.1 §4.1.1; RFC 9700 §2.1.1): missing or plain is refused.
    if (!challenge) return fail('invalid_request', 'code_challenge is required (PKCE with S256)');
    if (method !== 'S256') return fail('invalid_request', 'code_challenge_method must be S256');
    if (!CODE_CHALLENGE.test(challenge))
      return fail('invalid_request', 'code_challenge is not a base64url SHA-256 value');
    const resources = requestedResources(origin, query);
    const scope = approvalScope(resources, query, client.clientId);
    return {
      kind: 'ok',
      request: { client, redirectUri, state, codeChallenge: challenge, resources, scope },
    };
  } catch (err) {
    if (err instanceof OAuthProtocolError) return fail(err.error, err.message);
    throw err;
  }
}
