import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { CLI_TEST_TIMEOUT_MS, cliHome, runCli, type CliHome } from '../helpers/cli.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import { containing, matching, parseAs } from '../helpers/json.js';
import type { Verified } from '../helpers/answers.js';

// `svc service-accounts create|list|mint|delete` (CONTRACT §11) as a script runs it: --json on stdout,
// the secret printed once, the owner's API key from the credentials file.

let server: TestServer;
let home: CliHome;
let owner: TestUser;
let url: string;

beforeAll(async () => {
  server = await startTestServer();
  url = server.url;
  owner = await createUser(server);
  home = await cliHome();
  const key = await createApiToken(server, owner, owner.orgKey, 'laptop');
  await home.writeCredentials({
    version: 1,
    servers: { [url]: { api_key: { token: key.secret, org: owner.orgId, email: owner.email } } },
  });
});
afterAll(async () => {
  await home?.cleanup();
  await server?.close();
});

interface Listed {
  data: {
    id: string;
    name: string;
    role: string;
    credential: { token_id: number; scopes: string[] } | null;
  }[];
}

describe('svc service-accounts', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('creates, lists, mints (secret once, replacing the previous key) and deletes', async () => {
    const cli = (...args: string[]) => runCli(['service-accounts', ...args, '--url', url], { env: home.env });
    const created = await cli('create', 'nightly', '--role', 'viewer', '--json');
    expect(created.code).toBe(0);
    const sa = parseAs<{ id: string; name: string; role: string }>(created.stdout);
    expect(sa).toMatchObject({ id: matching(/^sa_/), name: 'nightly', role: 'viewer' });

    const first = await cli('mint', sa.id, '--scopes', 'model', '--expires-in-days', '30', '--json');
    expect(first.code).toBe(0);
    const minted = parseAs<{ id: number; token: string; scopes: string[]; expires_at: number }>(first.stdout);
    expect(minted.scopes).toEqual(['model']);
    expect(minted.expires_at).toBeGreaterThan(Date.now() / 1000 + 29 * 86_400);
    const v = await client(url).get<Verified>('/v1/auth/verify', { token: minted.token });
    expect(v.body.principal).toEqual({ type: 'service_account', id: sa.id });

    // Human form: the secret alone on stdout, what it is and that it is shown once on stderr.
    const second = await cli('mint', sa.id);
    expect(second.code).toBe(0);
    const secret = second.stdout.trim();
    expect(secret).toMatch(/^svc_[A-Za-z0-9_-]{43}$/);
    expect(second.stderr).toMatch(/not shown again/);
    expect((await client(url).get('/v1/auth/verify', { token: minted.token })).status).toBe(401);
    expect((await client(url).get('/v1/auth/verify', { token: secret })).status).toBe(200);

    const listed = parseAs<Listed>((await cli('list', '--json')).stdout);
    expect(listed.data).toEqual([
      containing({
        id: sa.id,
        name: 'nightly',
        role: 'viewer',
        credential: containing({ scopes: ['model', 'account'] }),
      }),
    ]);
    const text = await cli('list');
    expect(text.stdout).toContain(sa.id);
    expect(text.stdout).toContain(secret.slice(0, 8));
    expect(text.stdout).not.toContain(secret);

    const deleted = await cli('delete', sa.id, '--json');
    expect(deleted.code).toBe(0);
    expect(JSON.parse(deleted.stdout)).toEqual({ deleted: true });
    expect((await client(url).get('/v1/auth/verify', { token: secret })).status).toBe(401);
    expect(parseAs<Listed>((await cli('list', '--json')).stdout).data).toEqual([]);
  });

  it('says what went wrong: a bad option is exit 2, a member is refused with exit 4', async () => {
    const bad = await runCli(['service-accounts', 'mint', 'sa_x', '--expires-in-days', '900', '--url', url], {
      env: home.env,
    });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/1 to 400/);
    const team = await createUser(server);
    await addMember(server, team.orgKey, owner.userId, 'member');
    const refused = await runCli(['service-accounts', 'list', '--org', team.clientId, '--url', url], {
      env: home.env,
    });
    // The owner's key is bound to their own organization, and there they are only a member: 403.
    expect(refused.code).toBe(4);
  });
});
