import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import {
  CLI_TEST_TIMEOUT_MS,
  cliHome,
  runCli,
  type CliBalance,
  type CliHome,
  type WhoAmI,
} from '../helpers/cli.js';
import { createGrants, issueAccessToken, revokeGrants } from '../../oauth/grants.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import { BUILTIN_CLI_CLIENT_ID } from '../../src/ids.js';
import { parseAs } from '../helpers/json.js';

// One sign-in does it all (CONTRACT §7): with only svc-cli's OAuth grants (scope `model account`, as a
// device login stores them) and no API key, `svc whoami`, `orgs`, `balance` and `usage` read the account
// routes; whoami asks the server, so a grant revoked there is reported as revoked.

let server: TestServer;
let owner: TestUser;
let home: CliHome;
let grantId: string;
/** createUser's default organization, as GET /v1/clients names it. */
const ORG = "Test User's personal organization";

beforeAll(async () => {
  server = await startTestServer();
  owner = await createUser(server);
  await setOrgBalance(server, owner.orgKey, 4321);
  home = await cliHome();
  const [grant] = await createGrants(
    server.deps.db,
    {
      clientId: BUILTIN_CLI_CLIENT_ID,
      userId: owner.userId,
      orgKey: owner.orgKey,
      issuer: server.url,
      scope: 'model account',
    },
    ['model'],
    SYSTEM_ORIGIN,
  );
  grantId = grant!.id;
  const access = await issueAccessToken(server.deps, grant!, server.url);
  await home.writeCredentials({
    version: 1,
    servers: {
      [server.url]: {
        issuer: server.url,
        user: owner.userId,
        grant_org: owner.orgId,
        grants: {
          model: {
            access_token: access.token,
            refresh_token: 'srt_unused',
            expires_at: Math.floor(Date.now() / 1000) + 600,
            scope: 'model account',
          },
        },
      },
    },
  });
});
afterAll(async () => {
  await server?.close();
  await home?.cleanup();
});

describe('svc with the OAuth sign-in alone', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('lists the organizations and reads the balance, naming the organization', async () => {
    const orgs = await runCli(['orgs', '--url', server.url, '--json'], { env: home.env });
    expect(orgs.code, orgs.stderr).toBe(0);
    expect(parseAs<{ data: { id: string; role: string }[] }>(orgs.stdout).data).toEqual([
      expect.objectContaining({ id: owner.clientId, role: 'owner' }),
    ]);
    const json = await runCli(['balance', '--url', server.url, '--json'], { env: home.env });
    expect(json.code, json.stderr).toBe(0);
    const b = parseAs<CliBalance>(json.stdout);
    expect(b.balance.balance_credits).toBe(4321);
    expect(b.role).toBe('owner');
    const human = await runCli(['balance', '--url', server.url], { env: home.env });
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toBe(
      `${ORG} (${owner.clientId}): 4,321 tokens · $4.321\nYour pool (unallocated): ${poolOf(json.stdout)} tokens · $45.679\n`,
    );
  });

  it('whoami asks the server: e-mail, organization name and role in aligned columns', async () => {
    const text = await runCli(['whoami', '--url', server.url], { env: home.env });
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toBe(
      [
        `Server        ${server.url}`,
        `E-mail        ${owner.email}`,
        `User          ${owner.userId}`,
        `Organization  ${ORG} (${owner.clientId})`,
        'Role          owner',
        'Sign-in       OAuth (svc login), refreshed as needed',
        '',
      ].join('\n'),
    );
    const json = parseAs<WhoAmI>(
      (await runCli(['whoami', '--json', '--url', server.url], { env: home.env })).stdout,
    );
    expect(json).toMatchObject({
      status: 'active',
      email: owner.email,
      org_name: ORG,
      role: 'owner',
    });
  });

  it('usage: today and this month by model, from the account routes', async () => {
    const json = await runCli(['usage', '--json', '--url', server.url], { env: home.env });
    expect(json.code, json.stderr).toBe(0);
    const u = parseAs<{
      org: string;
      today: { totals: { calls: number } };
      month: { totals: { calls: number } };
    }>(json.stdout);
    expect(u.org).toBe(owner.clientId);
    expect(u.today.totals.calls).toBe(0);
    const text = await runCli(['usage', '--url', server.url], { env: home.env });
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toBe(
      `Tokens debited in ${ORG} (${owner.clientId}), UTC:\nModel                       Today                  This month\nTotal  0 tokens · $0.00 (0 calls)  0 tokens · $0.00 (0 calls)\n`,
    );
  });

  it('orgs use takes a name, either id spelling, and refuses an unknown one', async () => {
    for (const org of [ORG.toUpperCase(), owner.orgId, owner.clientId]) {
      const res = await runCli(['orgs', 'use', org, '--url', server.url], { env: home.env });
      expect(res.code, res.stderr).toBe(0);
      expect(res.stdout).toBe(`Now acting for ${ORG} (${owner.clientId}, owner).\n`);
    }
    const unknown = await runCli(['orgs', 'use', 'Nobody Inc', '--url', server.url], { env: home.env });
    expect(unknown.code).toBe(4);
    expect(unknown.stderr).toContain('You are not a member of an organization "Nobody Inc".');
    expect(unknown.stderr + unknown.stdout).not.toMatch(/x-svc/i);
  });

  it('a grant revoked at the server: whoami says revoked (exit 3), not the stored expiry', async () => {
    await revokeGrants(server.deps.db, [grantId], 'test', SYSTEM_ORIGIN);
    const text = await runCli(['whoami', '--url', server.url], { env: home.env });
    expect(text.code).toBe(3);
    expect(text.stdout).toContain('Sign-in       revoked or ended: the server no longer accepts it');
    expect(text.stdout).not.toMatch(/until|expires/);
    expect(text.stderr).toContain(`svc login --url ${server.url}`);
    const json = await runCli(['whoami', '--json', '--url', server.url], { env: home.env });
    expect(parseAs<WhoAmI>(json.stdout).status).toBe('revoked');
  });
});

const poolOf = (json: string) => parseAs<CliBalance>(json).owner!.unallocated_credits.toLocaleString('en');
