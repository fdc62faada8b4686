import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { and, eq, isNull } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { CLI_TEST_TIMEOUT_MS, cliHome, inTerminal, runCli, type CliHome } from '../helpers/cli.js';
import { client } from '../helpers/http.js';
import { enableTwoFactor, totp } from '../helpers/accounts-support.js';
import { parseAs } from '../helpers/json.js';
import { sessions } from '../../src/db/schema.js';
import type { KeyItem } from '../../src/cli/commands/keys.js';

// `svc keys` and `svc keys revoke ID` in a real pseudo-terminal: the routes are "S only" (CONTRACT §6),
// so the command signs in at the terminal — e-mail, password without echo, 2FA code — uses the session
// for itself and signs it out (docs/decisions/0060). The password never reaches the screen, no session
// outlives the command, and nothing is written to the credentials file but what was there.

let server: TestServer;
let owner: TestUser;
let team: TestUser;
let home: CliHome;
let work: string;

beforeAll(async () => {
  server = await startTestServer();
  owner = await createUser(server);
  team = await createUser(server, { name: 'Acme' });
  await addMember(server, team.orgKey, owner.userId, 'member');
  home = await cliHome();
  work = await mkdtemp(join(tmpdir(), 'svc-keys-'));
});
afterAll(async () => {
  await server?.close();
  await home?.cleanup();
  if (work) await rm(work, { recursive: true, force: true });
});

const liveSessions = async (user: TestUser) =>
  (
    await server.deps.db
      .select()
      .from(sessions)
      .where(and(eq(sessions.userId, user.userId), isNull(sessions.revokedAt)))
  ).length;

/** `svc ARGS` at a terminal; types the password at its prompt (and the 2FA code when given). */
async function signedInAtTerminal(args: string[], user: TestUser, code?: () => Promise<string>) {
  const t = inTerminal([...args, '--url', server.url], { cwd: work, env: { ...home.env, NO_COLOR: '1' } });
  await t.waitFor(/E-mail/);
  t.type(`${user.email}\r`);
  await t.waitFor(/Password/);
  t.type(`${user.password}\r`);
  if (code) {
    await t.waitFor(/Two-factor code/);
    t.type(`${await code()}\r`);
  }
  return t;
}

describe('svc keys', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('lists the person’s keys with organization, prefix, last use, expiry and scopes; the password is never echoed and the session is signed out', async () => {
    const laptop = await createApiToken(server, owner, owner.orgKey, 'old laptop');
    const ci = await createApiToken(server, owner, team.orgKey, 'ci');
    expect((await client(server.url).get('/v1/auth/verify', { token: ci.secret })).status).toBe(200);
    const before = await liveSessions(owner);

    const t = await signedInAtTerminal(['keys'], owner);
    expect(await t.exit).toBe(0);
    const screen = t.screen();
    expect(screen).not.toContain(owner.password);
    expect(screen).toMatch(/ID +Name +Organization +Prefix +Created +Last used +Expiry +Scopes/);
    expect(screen).toMatch(
      new RegExp(
        `${ci.id} +ci +Acme's personal organization +${ci.secret.slice(0, 8)}… +\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC +\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC +never expires +model account`,
      ),
    );
    expect(screen).toMatch(
      new RegExp(
        `${laptop.id} +old laptop +Test User's personal organization +${laptop.secret.slice(0, 8)}… .* never +never expires`,
      ),
    );
    expect(screen).not.toContain(ci.secret);
    expect(await liveSessions(owner)).toBe(before);
  });

  it('revoke ends the key at once; --json lists it as revoked with --all; a 2FA account is asked its code', async () => {
    const victim = await createApiToken(server, team, team.orgKey, 'leaked');
    const { secret, recoveryCodes } = await enableTwoFactor(client(server.url), team.session);
    const before = await liveSessions(team);
    const revoke = await signedInAtTerminal(['keys', 'revoke', String(victim.id)], team, () =>
      totp(secret, 1),
    );
    expect(await revoke.exit).toBe(0);
    expect(revoke.screen()).toMatch(
      new RegExp(`Revoked key ${victim.id} "leaked" \\(${victim.secret.slice(0, 8)}…\\)`),
    );
    expect((await client(server.url).get('/v1/auth/verify', { token: victim.secret })).status).toBe(401);
    expect(await liveSessions(team)).toBe(before);

    const list = await signedInAtTerminal(['keys', '--all', '--json'], team, () =>
      Promise.resolve(recoveryCodes[0]!),
    );
    expect(await list.exit).toBe(0);
    const json = list.screen().slice(list.screen().indexOf('{"data"'));
    const { data } = parseAs<{ data: (KeyItem & { org_name: string })[] }>(json.trim());
    const item = data.find((k) => k.id === victim.id)!;
    expect(item).toMatchObject({ token_name: 'leaked', org_name: "Acme's personal organization" });
    expect(item.revoked_at).toEqual(expect.any(Number));
  });

  it('a wrong password says so (exit 3) and signs nobody in', async () => {
    const t = inTerminal(['keys', '--email', owner.email, '--url', server.url], {
      cwd: work,
      env: { ...home.env, NO_COLOR: '1' },
    });
    await t.waitFor(/Password/);
    t.type('not the password\r');
    expect(await t.exit).toBe(3);
    expect(t.screen()).toContain('The e-mail address or the password is wrong.');
    expect(t.screen()).not.toContain('not the password');
  });

  it('without a terminal it asks for nothing and sends nothing: the password is never read from a pipe', async () => {
    const before = await liveSessions(owner);
    const res = await runCli(['keys', '--email', owner.email, '--url', server.url], {
      env: home.env,
      input: `${owner.password}\n`,
    });
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('asks for it at a terminal only');
    expect(await liveSessions(owner)).toBe(before);
  });
});
