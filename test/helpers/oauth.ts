import type { OAuthResource } from '../../src/db/schema.js';
import { createGrants, issueAccessToken } from '../../oauth/grants.js';
import { BUILTIN_CLI_CLIENT_ID } from '../../oauth/builtin.js';
import type { TestServer } from './server.js';

// Real access tokens from the real issuance code, without an HTTP flow: for the MCP and model suites,
// which test their resource, not the authorization server (test/oauth-*.test.ts test that).

export async function issueTestGrants(
  server: TestServer,
  user: { userId: string },
  opts: { orgKey: string; resources: OAuthResource[]; origin?: string; clientId?: string },
): Promise<{ platform?: string; model?: string; grantIds: Partial<Record<OAuthResource, string>> }> {
  const issuer = opts.origin ?? server.v2Url;
  const grants = await createGrants(
    server.deps.db,
    { clientId: opts.clientId ?? BUILTIN_CLI_CLIENT_ID, userId: user.userId, orgKey: opts.orgKey, issuer },
    opts.resources,
  );
  const out: { platform?: string; model?: string; grantIds: Partial<Record<OAuthResource, string>> } = { grantIds: {} };
  for (const grant of grants) {
    out[grant.resource] = (await issueAccessToken(server.deps, grant, issuer)).token;
    out.grantIds[grant.resource] = grant.id;
  }
  return out;
}
