import * as oauth from 'oauth4webapi';
import type { OAuthResource } from '../../src/db/schema.js';
import { createGrants, issueAccessToken } from '../../oauth/grants.js';
import { BUILTIN_CLI_CLIENT_ID } from '../../src/ids.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import type { TestServer } from './server.js';

// Real access tokens from the real issuance code, without an HTTP flow: for the MCP and model suites,
// which test their resource, not the authorization server (test/oauth-*.test.ts test that).

export async function issueTestGrants(
  server: TestServer,
  user: { userId: string },
  opts: {
    orgKey: string;
    resources: OAuthResource[];
    origin?: string;
    clientId?: string;
    /** The approval's scope, e.g. `platform:read` (oauth/params.ts approvalScope); default: full scopes. */
    scope?: string;
  },
): Promise<{ platform?: string; model?: string; grantIds: Partial<Record<OAuthResource, string>> }> {
  const issuer = opts.origin ?? server.v2Url;
  const grants = await createGrants(
    server.deps.db,
    {
      clientId: opts.clientId ?? BUILTIN_CLI_CLIENT_ID,
      userId: user.userId,
      orgKey: opts.orgKey,
      issuer,
      scope: opts.scope,
    },
    opts.resources,
    SYSTEM_ORIGIN,
  );
  const out: { platform?: string; model?: string; grantIds: Partial<Record<OAuthResource, string>> } = {
    grantIds: {},
  };
  for (const grant of grants) {
    out[grant.resource] = (await issueAccessToken(server.deps, grant, issuer)).token;
    out.grantIds[grant.resource] = grant.id;
  }
  return out;
}

/** The Cookie header of a signed-in browser: the session cookie (and the CSRF cookie once a page set it). */
export function sessionCookie(session: string, csrf?: string): string {
  return [`__Host-svc_session=${session}`, csrf ? `__Host-svc_csrf=${csrf}` : ''].filter(Boolean).join('; ');
}

export interface ConsentResult {
  /** Status of the consent page GET. */
  pageStatus: number;
  page: string;
  /** Where the decision POST sent the browser (absent when the page was not a consent form). */
  location?: string;
  postStatus?: number;
}

/**
 * Drives the consent page like a browser without JavaScript: GET the authorization URL with the session
 * cookie, read the CSRF field, POST the decision (and the organization as `client_id`).
 */
export async function driveConsent(
  authorizationUrl: string,
  session: string,
  opts: {
    decision?: 'approve' | 'deny';
    org?: string;
    csrfOverride?: string;
    /** Tick "all my organizations" (CONTRACT §7). */
    allOrganizations?: boolean;
  } = {},
): Promise<ConsentResult> {
  const page = await fetch(authorizationUrl, {
    headers: { cookie: sessionCookie(session) },
    redirect: 'manual',
  });
  const text = await page.text();
  const csrfCookie = /__Host-svc_csrf=([^;]+)/.exec(page.headers.get('set-cookie') ?? '')?.[1];
  const csrfField = /name="csrf_token" value="([^"]+)"/.exec(text)?.[1];
  const action = /<form method="post" action="([^"]+)"/.exec(text)?.[1]?.replace(/&amp;/g, '&');
  if (page.status !== 200 || !action || !csrfField) {
    return { pageStatus: page.status, page: text, location: page.headers.get('location') ?? undefined };
  }
  const form = new URLSearchParams({
    csrf_token: opts.csrfOverride ?? csrfField,
    decision: opts.decision ?? 'approve',
  });
  if (opts.org) form.set('client_id', opts.org);
  if (opts.allOrganizations) form.set('all_organizations', '1');
  const origin = new URL(authorizationUrl).origin;
  const post = await fetch(new URL(action, origin), {
    method: 'POST',
    headers: {
      cookie: sessionCookie(session, csrfCookie),
      'content-type': 'application/x-www-form-urlencoded',
      origin,
    },
    body: form.toString(),
    redirect: 'manual',
  });
  await post.text();
  return {
    pageStatus: 200,
    page: text,
    postStatus: post.status,
    location: post.headers.get('location') ?? undefined,
  };
}

/** oauth4webapi over the tests' plain-http loopback origins. */
export const insecureRequests = { [oauth.allowInsecureRequests]: true } as const;

/** RFC 8414 discovery of `origin`'s authorization server, as a strict client does it. */
export async function discoverAuthorizationServer(origin: string): Promise<oauth.AuthorizationServer> {
  const issuer = new URL(origin);
  return oauth.processDiscoveryResponse(
    issuer,
    await oauth.discoveryRequest(issuer, { algorithm: 'oauth2', ...insecureRequests }),
  );
}

/** A public client registered by DCR (RFC 7591), as a third-party app registers itself. */
export async function registerPublicClient(
  as: oauth.AuthorizationServer,
  metadata: { redirect_uris: string[]; client_name?: string; grant_types?: string[] },
): Promise<oauth.Client> {
  return oauth.processDynamicClientRegistrationResponse(
    await oauth.dynamicClientRegistrationRequest(
      as,
      { token_endpoint_auth_method: 'none', ...metadata },
      insecureRequests,
    ),
  );
}
