import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { and, eq } from 'drizzle-orm';
import { modelSuite } from '../helpers/model-suite.js';
import {
  approveOnDevicePage,
  browserLogin,
  CLI_TEST_TIMEOUT_MS,
  type CliHome,
  cliHome,
  type CliBalance,
  type WhoAmI,
  runCli,
  startCli,
} from '../helpers/cli.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { client } from '../helpers/http.js';
import { billingEntries } from '../../src/db/schema.js';
import { parseAs } from '../helpers/json.js';
import type { Verified } from '../helpers/answers.js';

// `svc login --browser` (code + PKCE, loopback redirect), `svc login --api-key` (the /v1/auth/device
// flow, replacing the previous key), and what an account looks like from the terminal: whoami with role,
// orgs, orgs use (the next call is billed to that organization), balance, mcp-config.

const suite = modelSuite();
let home: CliHome;
let team: TestUser;

beforeAll(async () => {
  home = await cliHome();
  // The owner is also a member of a teammate's organization.
  team = await createUser(suite.server, { name: 'Team Owner' });
  await addMember(suite.server, team.orgKey, suite.owner.userId, 'member');
  await setOrgBalance(suite.server, team.orgKey, 5_000);
});
afterAll(async () => {
  await home?.cleanup();
});

const usage = (orgKey: string) =>
  suite.server.deps.db
    .select()
    .from(billingEntries)
    .where(and(eq(billingEntries.orgKey, orgKey), eq(billingEntries.type, 'usage')))
    .orderBy(billingEntries.id); // in the order written, whatever the plan

describe('svc login --browser', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('signs in through the authorization code flow with a loopback redirect on a random port', async () => {
    const url = suite.server.v2Url;
    const login = await browserLogin(url, home.env, suite.owner);
    expect(login.stdout()).toContain(
      `Signed in to ${url} as ${suite.owner.email} (Test User's personal organization, owner).`,
    );
    const entry = (await home.credentials()).servers[url];
    expect(entry!.grants!.model!.scope).toBe('model account');
    expect(entry!.grants!.platform!.scope).toBe('platform');
    const chat = await runCli(['chat', '--url', url, 'hi'], { env: home.env });
    expect(chat.code).toBe(0);
    expect(chat.stdout).toBe('Hello from the fake upstream\n');
  });

  it('orgs use makes the next model call act for (and bill) that organization; a non-member org is refused', async () => {
    const url = suite.server.v2Url;
    const stranger = await createUser(suite.server);
    const refused = await runCli(['orgs', 'use', stranger.orgId, '--url', url], { env: home.env });
    expect(refused.code, refused.stderr).toBe(4);
    expect(refused.stderr).toContain('svc orgs use ORG');
    const use = await runCli(['orgs', 'use', team.clientId, '--url', url], { env: home.env });
    expect(use.code, use.stderr).toBe(0);
    const before = (await usage(team.orgKey)).length;
    const chat = await runCli(['chat', '--url', url, 'for', 'the', 'team'], { env: home.env });
    expect(chat.code, chat.stderr).toBe(0);
    expect(chat.stderr).toMatch(/20 tokens · \$0\.02 debited · balance 4,980 tokens · \$4\.98 \(req_/);
    expect((await usage(team.orgKey)).length).toBe(before + 1);
    const who = parseAs<WhoAmI>((await runCli(['whoami', '--json', '--url', url], { env: home.env })).stdout);
    expect(who).toMatchObject({
      org: team.clientId,
      org_name: "Team Owner's personal organization",
      role: 'member',
    });
  });
});

describe('svc login --api-key', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('says the key replaces the previous one, gets an svc_ key, and the previous key stops working', async () => {
    const url = suite.server.url;
    const previous = await createApiToken(suite.server, suite.owner, suite.owner.orgKey, 'old laptop');
    expect((await client(url).get('/v1/auth/verify', { token: previous.secret })).status).toBe(200);
    const login = startCli(['login', '--api-key', '--url', url], { env: home.env });
    const [, userCode] = await login.waitFor(
      /enter the code ([B-Z]{4}-[B-Z]{4})[\s\S]*Waiting for the approval/,
    );
    expect(login.stderr()).toMatch(/replaces your previous API key in the organization you approve/);
    // This terminal holds no key yet: a key held elsewhere is pointed to, not guessed at.
    expect(login.stderr()).toContain('`svc keys` lists your keys with their last use first.');
    await approveOnDevicePage(suite.server.v2Url, suite.owner, userCode!);
    expect(await login.exit).toBe(0);
    expect(login.stdout()).toContain(`as ${suite.owner.email} with an API key for ${suite.owner.orgId}`);
    expect((await client(url).get('/v1/auth/verify', { token: previous.secret })).status).toBe(401);
    const key = (await home.credentials()).servers[url]!.api_key!;
    expect(key.token).toMatch(/^svc_/);
    expect(login.stdout() + login.stderr()).not.toContain(key.token);
    expect((await client(url).get<Verified>('/v1/auth/verify', { token: key.token })).body.email).toBe(
      suite.owner.email,
    );
  });

  it('whoami shows the e-mail and role; orgs lists memberships; balance shows the org and the owner’s pool', async () => {
    const url = suite.server.url;
    const who = parseAs<WhoAmI>((await runCli(['whoami', '--json', '--url', url], { env: home.env })).stdout);
    expect(who).toMatchObject({ email: suite.owner.email, org: suite.owner.clientId, role: 'owner' });

    const orgs = await runCli(['orgs', '--url', url], { env: home.env });
    expect(orgs.code, orgs.stderr).toBe(0);
    expect(orgs.stdout).toMatch(
      new RegExp(`^\\* +Test User's personal organization +owner +${suite.owner.clientId}$`, 'm'),
    );
    expect(orgs.stdout).toMatch(
      new RegExp(`^  +Team Owner's personal organization +member +${team.clientId}$`, 'm'),
    );

    await setOrgBalance(suite.server, suite.owner.orgKey, 7_000);
    const balance = await runCli(['balance', '--json', '--url', url], { env: home.env });
    expect(balance.code, balance.stderr).toBe(0);
    const b = parseAs<CliBalance>(balance.stdout);
    expect(b.balance.balance_credits).toBe(7_000);
    expect(b.role).toBe('owner');
    expect(typeof b.owner!.unallocated_credits).toBe('number');
    const text = await runCli(['balance', '--url', url], { env: home.env });
    expect(text.stdout).toContain(
      `Test User's personal organization (${suite.owner.clientId}): 7,000 tokens · $7.00\n`,
    );
    expect(text.stdout).toContain('Your pool (unallocated)');
  });
});

describe('svc login --api-key again', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('names the key it would replace: its name, organization and last use, before the code', async () => {
    const url = suite.server.url;
    const key = (await home.credentials()).servers[url]!.api_key!;
    const again = startCli(['login', '--api-key', '--url', url], { env: home.env });
    const [warning] = await again.waitFor(/Your current API key[^\n]*\n[\s\S]*enter the code/);
    again.child.kill('SIGINT');
    await again.exit;
    expect(warning).toMatch(
      new RegExp(
        `^Your current API key "Device login" \\(${key.token.slice(0, 8)}…\\) for ${suite.owner.orgId} \\((last used \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC|never used)\\)`,
      ),
    );
    expect(warning).toContain('stops working if you approve that organization again.');
  });
});

describe('svc mcp-config', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('prints the /mcp/platform configuration for an editor', async () => {
    const res = await runCli(['mcp-config', '--editor', 'vscode', '--url', suite.server.v2Url], {
      env: home.env,
    });
    expect(res.code).toBe(0);
    expect(JSON.parse(res.stdout)).toEqual({
      servers: { svc: { type: 'http', url: `${suite.server.v2Url}/mcp/platform` } },
    });
    const bad = await runCli(['mcp-config', '--editor', 'notepad'], { env: home.env });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('Choose one of');
  });
});
