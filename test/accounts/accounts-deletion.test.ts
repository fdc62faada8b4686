import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { eq, sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createApiToken, createUser, STRONG_PASSWORD } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { client } from '../helpers/http.js';
import { PageClient } from '../helpers/page-client.js';
import { enableTwoFactor } from '../helpers/accounts-support.js';
import { queryRows } from '../../src/db/client.js';
import { billingSubscriptions, users } from '../../src/db/schema.js';
import { checkInvariants } from '../../src/billing/invariants.js';
import { reconcile } from '../../src/billing/reconcile.js';
import { recordDebt } from '../../src/billing/debt.js';
import { ensureDebtAccount, SOURCE_PURCHASES } from '../../src/billing/ledger.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { detailOf, type DetailError } from '../helpers/json.js';
import type { ClientRow, CreatedClient, MemberRow, Page, Registered } from '../helpers/answers.js';
import type { DeletionBlocker } from '../../src/accounts/account-deletion.js';

// Deleting one's account (docs/accounts.md "Deleting an account") over real HTTP:
// the password (and the 2FA code) asked again; refused while an owned organization has other members,
// while tokens are owed, or while a Pro subscription renews; else every credential stops working (the
// session, svc_ tokens, OAuth grants), every owned organization is deleted, the person's memberships
// end, and the ledger keeps every row: the invariants hold and reconcile finds nothing wrong.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const api = () => client(server.url);
const del = <T = unknown>(session: string, body: unknown) =>
  api().post<T>('/v1/account/delete', body, { token: session });
/** 409 ACCOUNT_DELETION_BLOCKED: the DetailError with every reason (src/accounts/account-deletion.ts). */
type Blocked = { detail: DetailError['detail'] & { blockers: DeletionBlocker[] } };
const entryCount = async () =>
  Number(
    (await queryRows<{ n: unknown }>(server.deps.db, sql`select count(*) as n from billing_entries`))[0]!.n,
  );

describe('POST /v1/account/delete', () => {
  it('asks for the password again, takes a session only, and validates its body', async () => {
    const user = await createUser(server);
    expect((await api().post('/v1/account/delete', { password: STRONG_PASSWORD })).status).toBe(401);
    const { secret } = await createApiToken(server, user, user.orgKey, 'ci');
    expect((await del(secret, { password: STRONG_PASSWORD })).status).toBe(401);
    const missing = await del(user.session, {});
    expect(missing.status).toBe(400);
    expect(detailOf(missing.body).code).toBe('VALIDATION_ERROR');
    const wrong = await del(user.session, { password: 'not-the-Password-1' });
    expect(wrong.status).toBe(400);
    expect(detailOf(wrong.body).code).toBe('WRONG_PASSWORD');
    expect((await api().get('/v1/clients', { token: user.session })).status).toBe(200);
  });

  it('with 2FA on, a code is needed too, and a wrong password or a wrong code get one answer', async () => {
    const user = await createUser(server);
    const { recoveryCodes } = await enableTwoFactor(api(), user.session);
    // No code: asked for before the password is looked at, so the answer is the same for any password.
    for (const password of [STRONG_PASSWORD, 'not-the-Password-1']) {
      const noCode = await del(user.session, { password });
      expect(noCode.status).toBe(400);
      expect(detailOf(noCode.body).code).toBe('CODE_REQUIRED');
    }
    // The right password with a wrong code, and a wrong password with a right code: the same answer.
    const badCode = await del(user.session, { password: STRONG_PASSWORD, code: '000000' });
    const badPassword = await del(user.session, { password: 'not-the-Password-1', code: recoveryCodes[1] });
    expect([badCode.status, badPassword.status]).toEqual([400, 400]);
    expect(badPassword.body).toEqual(badCode.body);
    expect(detailOf(badCode.body).code).toBe('WRONG_PASSWORD_OR_CODE');
    // The right code sent with a wrong password was not spent.
    const ok = await del(user.session, { password: STRONG_PASSWORD, code: recoveryCodes[1] });
    expect(ok.status).toBe(200);
  });

  it('is refused, with every reason, while an owned organization has members, tokens are owed or Pro renews', async () => {
    const owner = await createUser(server);
    const teammate = await createUser(server);
    await addMember(server, owner.orgKey, teammate.userId, 'viewer');
    const db = server.deps.db;
    await db.transaction(async (tx) => {
      await ensureDebtAccount(tx, owner.userId);
      await recordDebt(tx, {
        key: `test-debt:${owner.userId}`,
        ownerId: owner.userId,
        to: SOURCE_PURCHASES,
        amount: 700,
        type: 'debt',
        description: 'test debt',
      });
    });
    await db.insert(billingSubscriptions).values({
      id: `sub_test_${owner.userId}`,
      orgKey: owner.orgKey,
      customerId: 'cus_test',
      status: 'active',
    });
    const refused = await del<Blocked>(owner.session, { password: STRONG_PASSWORD });
    expect(refused.status).toBe(409);
    expect(detailOf(refused.body).code).toBe('ACCOUNT_DELETION_BLOCKED');
    expect(refused.body.detail.blockers.map((b) => b.code).sort()).toEqual([
      'ACTIVE_SUBSCRIPTION',
      'OUTSTANDING_DEBT',
      'OWNS_SHARED_ORGANIZATION',
    ]);
    expect(refused.body.detail.blockers[0]).toMatchObject({ client_id: owner.clientId });
    // Nothing changed: the account, its session and its organization are as they were.
    expect(
      (await api().get<Page<ClientRow>>('/v1/clients', { token: owner.session })).body.data,
    ).toHaveLength(1);
    // A subscription set to end at period end no longer blocks.
    await db
      .update(billingSubscriptions)
      .set({ cancelAtPeriodEnd: true })
      .where(eq(billingSubscriptions.orgKey, owner.orgKey));
    const still = await del<Blocked>(owner.session, { password: STRONG_PASSWORD });
    expect(still.body.detail.blockers.map((b) => b.code).sort()).toEqual([
      'OUTSTANDING_DEBT',
      'OWNS_SHARED_ORGANIZATION',
    ]);
  });

  it('revokes every credential, deletes what the person owned, and leaves the ledger whole', async () => {
    const person = await createUser(server, { name: 'Leaving Person' });
    const other = await createUser(server, { name: 'Other Owner' });
    await addMember(server, other.orgKey, person.userId, 'member');
    const side = await api().post<CreatedClient>(
      '/v1/clients',
      { name: 'Side project' },
      { token: person.session },
    );
    const sideKey = side.body.id.replace(/^client_/, '');
    // 40,000 stay with the personal organization, 5,000 go to the side one, 5,000 stay in the pool.
    for (const [id, target] of [
      [person.clientId, 40_000],
      [side.body.id, 5_000],
    ] as const) {
      const alloc = await api().put(
        `/v1/owner/orgs/${id}/allocation`,
        { target_credits: target },
        { token: person.session },
      );
      expect(alloc.status).toBe(200);
    }
    // Spend in both organizations: the person's own and the other owner's.
    const own = await createApiToken(server, person, person.orgKey, 'laptop');
    const theirs = await createApiToken(server, person, other.orgKey, 'shared');
    for (const key of [own.secret, theirs.secret]) {
      const sdk = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
      await sdk.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] });
    }
    const grants = await issueTestGrants(server, person, { orgKey: person.orgKey, resources: ['model'] });
    expect((await client(server.v2Url).get('/v1/models', { token: grants.model! })).status).toBe(200);
    const otherBalance = await orgBalanceCredits(server.deps.db, other.orgKey);
    const entriesBefore = await entryCount();
    const [pool] = await queryRows<{ balance: unknown }>(
      server.deps.db,
      sql`select balance from billing_accounts where id = ${`pool:${person.userId}`}`,
    );
    const unspent =
      Number(pool!.balance) +
      (await orgBalanceCredits(server.deps.db, person.orgKey)) +
      (await orgBalanceCredits(server.deps.db, sideKey));

    const res = await del(person.session, { password: STRONG_PASSWORD });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      deleted: true,
      deleted_clients: 2,
      forfeited_credits: unspent,
      revoked: { sessions: 1, oauth_grants: 1, api_tokens: 2 },
    });
    expect(res.headers.getSetCookie().join(' ')).toMatch(/__Host-svc_session=;/);

    // Every credential is dead.
    for (const token of [person.session, own.secret, theirs.secret])
      expect((await api().get('/v1/clients', { token })).status).toBe(401);
    expect((await client(server.v2Url).get('/v1/models', { token: grants.model! })).status).toBe(401);
    expect((await api().post('/v1/login', { email: person.email, password: STRONG_PASSWORD })).status).toBe(
      401,
    );

    // The person's row stays, anonymised; the other owner's team no longer lists them.
    const [row] = await server.deps.db.select().from(users).where(eq(users.id, person.userId));
    expect(row).toMatchObject({ name: 'Deleted account', emailVerifiedAt: null, totpSecretEnc: null });
    expect(row!.deletedAt).not.toBeNull();
    expect(row!.email).not.toBe(person.email);
    const members = await api().get<Page<MemberRow>>(`/v1/clients/${other.clientId}/members`, {
      token: other.session,
    });
    expect(members.body.data.map((m) => m.user_id)).toEqual([other.userId]);

    // The ledger: no row deleted; the two clients' balances went back to the pool (reclaim rows), the
    // other owner's balance is untouched; the invariants hold and reconcile finds nothing.
    const reclaims = await queryRows<{ org_key: string; type: string }>(
      server.deps.db,
      sql`select org_key, type from billing_entries where key like 'reclaim:deleted:%' and org_key in (${person.orgKey}, ${sideKey})`,
    );
    expect(reclaims).toHaveLength(2);
    expect(await entryCount()).toBe(entriesBefore + 2);
    const [after] = await queryRows<{ balance: unknown }>(
      server.deps.db,
      sql`select balance from billing_accounts where id = ${`pool:${person.userId}`}`,
    );
    expect(Number(after!.balance)).toBe(unspent);
    expect(await orgBalanceCredits(server.deps.db, other.orgKey)).toBe(otherBalance);
    const usage = await queryRows<{ n: unknown }>(
      server.deps.db,
      sql`select count(*) as n from usage_records where user_id = ${person.userId}`,
    );
    expect(Number(usage[0]!.n)).toBe(2);
    // The other owner's usage page still counts the call, now under "Deleted account".
    const byMember = await api().get(`/v1/clients/${other.clientId}/usage`, {
      token: other.session,
      query: { group_by: 'member' },
    });
    expect(byMember.status).toBe(200);
    expect(JSON.stringify(byMember.body)).toContain(person.userId);
    expect(await checkInvariants(server.deps.db)).toEqual([]);
    expect((await reconcile(server.deps.db, server.deps.log, null)).violations).toEqual([]);

    // The e-mail address is free again: a new account, a new id.
    const again = await api().post<Registered>('/v1/register', {
      email: person.email,
      name: 'Back Again',
      password: STRONG_PASSWORD,
    });
    expect(again.status).toBe(200);
    expect(again.body.user.id).not.toBe(person.userId);
  });
});

// A stolen session must not recover the password (docs/accounts.md § Re-entering the password): every
// route that checks it counts failures in the sign-in limiter of the person (CONTRACT §1).
describe('password checks share the sign-in limiter', () => {
  const wrong = (i: number) => `wrong-Password-${i}`;

  it('account deletion: 10 wrong passwords, then 429 with Retry-After, and sign-in is refused too', async () => {
    const user = await createUser(server);
    for (let i = 0; i < 10; i++) {
      const res = await del(user.session, { password: wrong(i) });
      expect(res.status, `attempt ${i + 1}`).toBe(400);
    }
    const limited = await del(user.session, { password: STRONG_PASSWORD });
    expect(limited.status).toBe(429);
    expect(detailOf(limited.body).code).toBe('RATE_LIMITED');
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    const login = await api().post('/v1/login', { email: user.email, password: STRONG_PASSWORD });
    expect(login.status).toBe(429);
    // The account is still there: nothing was deleted by the limited attempt.
    expect((await api().get('/v1/clients', { token: user.session })).status).toBe(200);
  });

  it('sign-in failures count against account deletion as well', async () => {
    const user = await createUser(server);
    for (let i = 0; i < 10; i++)
      expect((await api().post('/v1/login', { email: user.email, password: wrong(i) })).status).toBe(401);
    expect((await del(user.session, { password: STRONG_PASSWORD })).status).toBe(429);
  });

  it('with 2FA on, a wrong code counts as well: the answer and the count do not depend on the password', async () => {
    const user = await createUser(server);
    await enableTwoFactor(api(), user.session);
    for (let i = 0; i < 10; i++) {
      const password = i % 2 === 0 ? STRONG_PASSWORD : wrong(i);
      const res = await del(user.session, { password, code: '000000' });
      expect(detailOf(res.body).code, `attempt ${i + 1}`).toBe('WRONG_PASSWORD_OR_CODE');
    }
    expect((await del(user.session, { password: STRONG_PASSWORD, code: '000000' })).status).toBe(429);
    expect((await api().post('/v1/login', { email: user.email, password: STRONG_PASSWORD })).status).toBe(
      429,
    );
  });

  it('the settings page’s password change: 10 wrong current passwords, then 429, sign-in too', async () => {
    const user = await createUser(server);
    const page = new PageClient(server.v2Url);
    page.jar.set('__Host-svc_session', user.session);
    const change = (current: string) =>
      page.submit('/account/settings', '/account/settings/password', {
        current_password: current,
        password: 'a-New-Password-42',
      });
    for (let i = 0; i < 10; i++) expect((await change(wrong(i))).status, `attempt ${i + 1}`).toBe(400);
    const limited = await change(STRONG_PASSWORD);
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect((await api().post('/v1/login', { email: user.email, password: STRONG_PASSWORD })).status).toBe(
      429,
    );
  });
});
