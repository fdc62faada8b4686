import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stat } from 'node:fs/promises';
import { and, eq } from 'drizzle-orm';
import * as oauth from 'oauth4webapi';
import { modelSuite } from '../helpers/model-suite.js';
import {
  approveOnDevicePage,
  CLI_TEST_TIMEOUT_MS,
  type CliHome,
  cliHome,
  type CliChat,
  type WhoAmI,
  runCli,
  startCli,
} from '../helpers/cli.js';
import { billingEntries } from '../../src/db/schema.js';
import { parseAs } from '../helpers/json.js';

// `svc login` by the OAuth device grant, approved by a signed-in person on /account/device; then whoami,
// chat with the exact debit, refresh (by expiry and after a 401), and logout revoking both grants. The
// CLI is a real child process with its own config folder; svc runs in front of the fake provider.

const suite = modelSuite();
let home: CliHome;
let url: string;
const insecure = { [oauth.allowInsecureRequests]: true };
const client: oauth.Client = { client_id: 'svc-cli' };

beforeAll(async () => {
  home = await cliHome();
  url = suite.server.v2Url;
});
afterAll(async () => {
  await home?.cleanup();
});

const cli = (...args: string[]) => runCli([...args, '--url', url], { env: home.env });
const usageRows = (orgKey: string) =>
  suite.server.deps.db
    .select()
    .from(billingEntries)
    .where(and(eq(billingEntries.orgKey, orgKey), eq(billingEntries.type, 'usage')))
    .orderBy(billingEntries.id); // in the order written, whatever the plan

async function introspect(token: string) {
  const as = await oauth.processDiscoveryResponse(
    new URL(url),
    await oauth.discoveryRequest(new URL(url), { algorithm: 'oauth2', ...insecure }),
  );
  return oauth.processIntrospectionResponse(
    as,
    client,
    await oauth.introspectionRequest(as, client, oauth.None(), token, insecure),
  );
}

describe(
  'svc login (device grant) and what a signed-in terminal does',
  { timeout: CLI_TEST_TIMEOUT_MS },
  () => {
    it('signs in: shows the code, polls, stores both grants in a 0600 file', async () => {
      const login = startCli(['login', '--url', url], { env: home.env });
      // The whole notice, not its first write: stderr may arrive in pieces.
      const [, userCode] = await login.waitFor(
        /enter the code ([B-Z]{4}-[B-Z]{4})[\s\S]*Waiting for the approval/,
      );
      expect(login.stderr()).toContain(`${url}/account/device`);
      expect(login.stderr()).toContain(`${url}/account/device?user_code=${userCode}`);
      await approveOnDevicePage(url, suite.owner, userCode!);
      expect(await login.exit).toBe(0);
      expect(login.stdout()).toBe(
        `Signed in to ${url} as ${suite.owner.email} (Test User's personal organization, owner).\n`,
      );

      const file = `${home.env.XDG_CONFIG_HOME}/svc/credentials.json`;
      expect((await stat(file)).mode & 0o777).toBe(0o600);
      const entry = (await home.credentials()).servers[url];
      expect(entry).toMatchObject({ issuer: url, user: suite.owner.userId, grant_org: suite.owner.orgId });
      expect(entry!.grants!.model!.scope).toBe('model account');
      expect(entry!.grants!.platform!.scope).toBe('platform');
      expect((await introspect(entry!.grants!.model!.access_token)).active).toBe(true);
      // The secret is in the file only, never on the terminal.
      expect(login.stdout() + login.stderr()).not.toContain(entry!.grants!.model!.refresh_token);
    });

    it('whoami, orgs, balance and usage work with the device login alone (no API key)', async () => {
      expect((await home.credentials()).servers[url]!.api_key).toBeUndefined();
      const text = await cli('whoami');
      expect(text.code, text.stderr).toBe(0);
      expect(text.stdout).toMatch(new RegExp(`^E-mail +${suite.owner.email}$`, 'm'));
      expect(text.stdout).toMatch(
        new RegExp(`^Organization +Test User's personal organization \\(${suite.owner.clientId}\\)$`, 'm'),
      );
      expect(text.stdout).toMatch(/^Role +owner$/m);
      for (const command of ['orgs', 'balance', 'usage']) {
        const res = await cli(command);
        expect(res.code, `${command}: ${res.stderr}`).toBe(0);
        expect(res.stdout).toContain("Test User's personal organization");
      }
      const json = await cli('whoami', '--json');
      const who = parseAs<WhoAmI>(json.stdout);
      expect(who).toMatchObject({
        server: url,
        status: 'active',
        user: suite.owner.userId,
        email: suite.owner.email,
        org: suite.owner.clientId,
        role: 'owner',
      });
      const expiry = Date.parse(who.grants.model!.expires_at);
      expect(expiry).toBeGreaterThan(Date.now() + 10 * 60_000);
      expect(Date.parse(who.grants.platform!.expires_at)).toBeGreaterThan(Date.now());
    });

    it('chat one-shot streams the answer and shows the exact debit, as the ledger has it', async () => {
      const before = (await usageRows(suite.owner.orgKey)).length;
      const res = await cli('chat', 'Say', 'hello');
      expect(res.code).toBe(0);
      expect(res.stdout).toBe('Hello from the fake upstream\n');
      // Fake provider: 10 prompt + 5 completion tokens, priced prompt + 2 × completion → 20 tokens.
      expect(res.stderr).toMatch(/^20 tokens · \$0\.02 debited · balance 9,980 tokens · \$9\.98 \(req_/m);
      const usage = await cli('usage');
      expect(usage.stdout).toMatch(
        /^Total +20 tokens · \$0\.02 \(1 call\) +20 tokens · \$0\.02 \(1 call\)$/m,
      );
      const rows = await usageRows(suite.owner.orgKey);
      expect(rows.length).toBe(before + 1);
      expect(Number(rows.at(-1)!.amount)).toBe(20);
      const request = suite.fake.requests.at(-1)!;
      expect(request.body.stream).toBe(true);
      expect(request.body.messages).toEqual([{ role: 'user', content: 'Say hello' }]);
    });

    it('chat reads the prompt from stdin; --json prints the response object with the verified outcome', async () => {
      const res = await runCli(['chat', '--json', '--url', url], { env: home.env, input: 'What is up?\n' });
      expect(res.code).toBe(0);
      const body = parseAs<CliChat>(res.stdout);
      expect(body.object).toBe('chat.completion');
      expect(body.choices[0]!.message.content).toBe('Hello from the fake upstream');
      expect(body.svc_outcome).toMatchObject({
        credits_debited: 20,
        balance_credits: 9_980,
        org: suite.owner.orgId,
      });
      expect(suite.fake.requests.at(-1)!.body.messages).toEqual([{ role: 'user', content: 'What is up?' }]);
    });

    it('refreshes an expired access token before the call, and rotates the refresh token', async () => {
      const stored = await home.credentials();
      const old = stored.servers[url]!.grants!.model!;
      stored.servers[url]!.grants!.model!.expires_at = Math.floor(Date.now() / 1000) - 1;
      await home.writeCredentials(stored);
      const res = await cli('chat', '--no-stream', 'again');
      expect(res.code).toBe(0);
      expect(res.stdout).toBe('Hello from the fake upstream\n');
      const fresh = (await home.credentials()).servers[url]!.grants!.model!;
      expect(fresh.access_token).not.toBe(old.access_token);
      expect(fresh.refresh_token).not.toBe(old.refresh_token);
      expect(fresh.expires_at).toBeGreaterThan(Date.now() / 1000 + 800);
      expect((await introspect(fresh.refresh_token)).active).toBe(true);
    });

    it('refreshes and repeats the call once when the server refuses the stored access token (401)', async () => {
      const stored = await home.credentials();
      const good = stored.servers[url]!.grants!.model!.access_token;
      // A token the server's verifier refuses (bad signature), still "valid" by the stored expiry.
      stored.servers[url]!.grants!.model!.access_token = `${good.slice(0, -4)}AAAA`;
      await home.writeCredentials(stored);
      const res = await cli('chat', 'once more');
      expect(res.code).toBe(0);
      expect(res.stdout).toBe('Hello from the fake upstream\n');
      const fresh = (await home.credentials()).servers[url]!.grants!.model!.access_token;
      expect(fresh).not.toBe(good);
    });

    it('logout revokes both grants (introspection: inactive) and forgets them; then commands say to sign in', async () => {
      const entry = (await home.credentials()).servers[url];
      const res = await cli('logout');
      expect(res.code).toBe(0);
      expect(res.stdout).toContain('revoked the');
      for (const g of [entry!.grants!.model!, entry!.grants!.platform!]) {
        expect((await introspect(g.refresh_token)).active).toBe(false);
        expect((await introspect(g.access_token)).active).toBe(false);
      }
      expect((await home.credentials()).servers[url]).toBeUndefined();
      const after = await cli('chat', 'hi');
      expect(after.code).toBe(3);
      expect(after.stderr).toContain('You are not signed in');
      expect(after.stderr).toContain(`svc login --url ${url}`);
    });
  },
);
