import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { CLI_TEST_TIMEOUT_MS, cliHome, runCli, type CliBalance, type CliHome } from '../helpers/cli.js';
import { createGrants, issueAccessToken } from '../../oauth/grants.js';
import { BUILTIN_CLI_CLIENT_ID } from '../../oauth/builtin.js';
import { parseAs } from '../helpers/json.js';

// One sign-in does it all (CONTRACT §7): with only svc-cli's OAuth grants (scope `model account`, as a
// device login stores them) and no API key, `svc orgs` and `svc balance` read the account routes.

let server: TestServer;
let owner: TestUser;
let home: CliHome;

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
  );
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
    expect(human.stdout).toMatch(new RegExp(`\\(${owner.orgId}\\): 4,321 tokens`));
  });
});
