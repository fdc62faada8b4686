import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createUser, STRONG_PASSWORD } from '../helpers/fixtures.js';
import { parseAs, readJson } from '../helpers/json.js';
import { eventually, startReceiver } from '../helpers/webhook-receiver.js';
import { allStoredEvents, chainEvents } from '../helpers/audit.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { enableTwoFactor, newEmail, signUp, tokenFromMail, totp } from '../helpers/accounts-support.js';
import { auditListAnswer, auditVerifyAnswer } from '../../src/audit/schema.js';
import { changePassword, signOutSessions } from '../../src/accounts/self-service.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import type { CreatedClient, MintedToken, Checkout } from '../helpers/answers.js';

// Every kind of change CONTRACT §11 lists writes its event (beyond test/audit-log.test.ts's first ones),
// a person's own account events land in their account log, and no event of this file holds any secret
// the file handled: tokens, passwords, codes, links, signing secrets.

let server: TestServer;
let api: ReturnType<typeof client>;
/** Every secret this file saw; the last test looks for each in every stored event. */
const secrets = new Set<string>([STRONG_PASSWORD]);
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

async function owned() {
  const owner = await createUser(server);
  secrets.add(owner.session);
  const created = await api.post<CreatedClient>('/v1/clients', { name: 'Team' }, { token: owner.session });
  return { owner, clientId: created.body.id, orgKey: created.body.id.slice('client_'.length) };
}

const actions = async (chain: string) => (await chainEvents(server, chain)).map((e) => e.action);

describe('organization events', () => {
  it('invitations sent, replaced, accepted, revoked; the accepted one adds the member', async () => {
    const { owner, clientId, orgKey } = await owned();
    const invitee = await createUser(server);
    const as = { token: owner.session };
    await api.post(`/v1/clients/${clientId}/invitations`, { email: invitee.email }, as);
    const again = await api.post<{ id: string }>(
      `/v1/clients/${clientId}/invitations`,
      { email: invitee.email },
      as,
    );
    const token = await tokenFromMail(api, invitee.email, server.v2Url, '/account/invitations/accept');
    secrets.add(token);
    expect((await api.post('/v1/invitations/accept', { token }, { token: invitee.session })).status).toBe(
      200,
    );
    const other = await api.post<{ id: string }>(
      `/v1/clients/${clientId}/invitations`,
      { email: newEmail() },
      as,
    );
    expect((await api.delete(`/v1/clients/${clientId}/invitations/${other.body.id}`, as)).status).toBe(200);
    const events = await chainEvents(server, orgKey);
    expect(events.map((e) => e.action)).toEqual([
      'invitation.sent',
      'invitation.revoked',
      'invitation.sent',
      'invitation.accepted',
      'member.added',
      'invitation.sent',
      'invitation.revoked',
    ]);
    expect(events[1]!.details).toEqual({ reason: 'replaced' });
    expect(events[3]!.target).toEqual({ type: 'invitation', id: again.body.id });
    expect(events[3]!.actor).toEqual({ type: 'user', id: invitee.userId, email: invitee.email });
    expect(events[4]!.details).toEqual({ role: 'member', invitation_id: again.body.id });
  });

  it('budgets, the balance alert, auto top-up, webhook endpoints', async () => {
    const { owner, clientId, orgKey } = await owned();
    const as = { token: owner.session };
    const mia = await createUser(server);
    await api.post(`/v1/clients/${clientId}/members`, { email: mia.email }, as);
    const budget = { period: 'day', budget_credits: 500 };
    expect((await api.put(`/v1/clients/${clientId}/members/${mia.userId}/budget`, budget, as)).status).toBe(
      200,
    );
    expect((await api.delete(`/v1/clients/${clientId}/members/${mia.userId}/budget`, as)).status).toBe(200);
    expect(
      (await api.put(`/v1/clients/${clientId}/balance-alert`, { threshold_credits: 1000 }, as)).status,
    ).toBe(200);
    const topup = { trigger_credits: 100, amount_usd: 500, monthly_cap_usd: 5000 };
    expect((await api.put(`/v1/clients/${clientId}/auto-topup`, topup, as)).status).toBe(200);
    expect((await api.delete(`/v1/clients/${clientId}/auto-topup`, as)).status).toBe(200);
    const endpoint = await api.post<{ id: string; secret: string }>(
      `/v1/clients/${clientId}/webhook-endpoints`,
      { url: 'https://hooks.example.test/svc', events: ['balance.low'] },
      as,
    );
    expect(endpoint.status).toBe(200);
    secrets.add(endpoint.body.secret);
    expect(
      (await api.delete(`/v1/clients/${clientId}/webhook-endpoints/${endpoint.body.id}`, as)).status,
    ).toBe(200);
    const events = await chainEvents(server, orgKey);
    expect(events.map((e) => e.action)).toEqual([
      'member.added',
      'budget.set',
      'budget.set',
      'alert.set',
      'auto_topup.set',
      'auto_topup.set',
      'webhook_endpoint.created',
      'webhook_endpoint.deleted',
    ]);
    expect(events[1]!.details).toEqual({ user_id: mia.userId, period: 'day', limit_credits: 500 });
    expect(events[2]!.details).toEqual({ user_id: mia.userId, period: null, limit_credits: null });
    expect(events[3]!.details).toEqual({ threshold_credits: 1000 });
    expect(events[4]!.details).toEqual({ enabled: true, ...topup });
    expect(events[5]!.details).toEqual({ enabled: false, disabled_reason: null });
    expect(events[6]!.target).toEqual({ type: 'webhook_endpoint', id: endpoint.body.id });
    expect(events[6]!.details).toEqual({ url: 'https://hooks.example.test/svc', events: ['balance.low'] });
  });

  it('service accounts created and deleted (its credential revoked), limits set', async () => {
    const { owner, clientId, orgKey } = await owned();
    const as = { token: owner.session };
    const sa = await api.post<{ id: string }>(`/v1/clients/${clientId}/service-accounts`, { name: 'ci' }, as);
    expect(sa.status).toBe(200);
    const minted = await api.post<{ id: number; token: string }>(
      `/v1/clients/${clientId}/service-accounts/${sa.body.id}/tokens`,
      {},
      as,
    );
    expect(minted.status).toBe(200);
    secrets.add(minted.body.token);
    expect((await api.put(`/v1/clients/${clientId}/limits`, { rpm: 60, tpm: null }, as)).status).toBe(200);
    const tokenLimits = await api.put(
      `/v1/clients/${clientId}/tokens/${minted.body.id}/limits`,
      { rpm: 5 },
      as,
    );
    expect(tokenLimits.status).toBe(200);
    expect((await api.delete(`/v1/clients/${clientId}/service-accounts/${sa.body.id}`, as)).status).toBe(200);
    const events = await chainEvents(server, orgKey);
    expect(events.map((e) => e.action)).toEqual([
      'service_account.created',
      'token.created',
      'limits.set',
      'limits.set',
      'token.revoked',
      'service_account.deleted',
    ]);
    expect(events[0]!.target).toEqual({ type: 'service_account', id: sa.body.id });
    expect(events[0]!.details).toEqual({ name: 'ci', role: 'member' });
    expect(events[1]!.details).toMatchObject({ holder_id: sa.body.id });
    expect(events[2]!.details).toEqual({ rpm: 60, tpm: null });
    expect(events[3]!.target).toEqual({ type: 'token', id: String(minted.body.id) });
    expect(events[4]!.details).toEqual({ holder_id: sa.body.id, reason: 'service_account_deleted' });
  });

  it('OAuth grants approved and revoked (a removed member’s grants too)', async () => {
    const { owner, clientId, orgKey } = await owned();
    const mia = await createUser(server);
    await api.post(`/v1/clients/${clientId}/members`, { email: mia.email }, { token: owner.session });
    const grants = await issueTestGrants(server, mia, { orgKey, resources: ['platform', 'model'] });
    for (const t of [grants.platform, grants.model]) if (t) secrets.add(t);
    await api.delete(`/v1/clients/${clientId}/members/${mia.userId}`, { token: owner.session });
    const events = await chainEvents(server, orgKey);
    expect(events.map((e) => e.action)).toEqual([
      'member.added',
      'grant.approved',
      'grant.approved',
      'member.removed',
      'grant.revoked',
      'grant.revoked',
    ]);
    expect(events[1]!.actor).toEqual({ type: 'user', id: mia.userId });
    expect(events.slice(4).map((e) => e.details.reason)).toEqual(['member_removed', 'member_removed']);
    expect(new Set(events.slice(1, 3).map((e) => e.target.id))).toEqual(
      new Set([grants.grantIds.platform, grants.grantIds.model]),
    );
  });

  it('a paid top-up: payment.succeeded by the system, in the organization it was bought for', async () => {
    const owner = await createUser(server);
    const start = await api.post<Checkout>(
      `/v1/clients/${owner.clientId}/credits/topup`,
      { amount_usd: 1_000, success_url: 'https://app.example/ok', cancel_url: 'https://app.example/no' },
      { token: owner.session },
    );
    expect(start.status).toBe(200);
    const page = await fetch(start.body.checkout_url);
    const text = await page.text();
    const cookie = page.headers
      .getSetCookie()
      .map((c) => c.split(';')[0])
      .join('; ');
    const csrf = /name="csrf_token" value="([^"]+)"/.exec(text)![1]!;
    const action = new URL(/<form method="post" action="([^"]+)"/.exec(text)![1]!, start.body.checkout_url);
    const paid = await fetch(action, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', cookie, origin: action.origin },
      body: new URLSearchParams({ csrf_token: csrf, decision: 'pay' }).toString(),
      redirect: 'manual',
    });
    expect(paid.status).toBe(303);
    const events = await chainEvents(server, owner.orgKey);
    const payment = events.find((e) => e.action === 'payment.succeeded');
    expect(payment).toBeDefined();
    expect(payment!.actor).toEqual({ type: 'system', id: null });
    expect(payment!.details).toMatchObject({ kind: 'topup', amount_cents: 1_000, credits: 10_000 });
  });
});

describe('the outbound audit.event (opt-in)', () => {
  it('an endpoint subscribed to audit.event receives each event as the API shows it; others do not', async () => {
    const { owner, clientId } = await owned();
    const as = { token: owner.session };
    const receiver = await startReceiver();
    const other = await startReceiver();
    try {
      const subscribed = await api.post<{ secret: string }>(
        `/v1/clients/${clientId}/webhook-endpoints`,
        { url: receiver.url, events: ['audit.event'] },
        as,
      );
      expect(subscribed.status).toBe(200);
      secrets.add(subscribed.body.secret);
      const notSubscribed = await api.post<{ secret: string }>(
        `/v1/clients/${clientId}/webhook-endpoints`,
        { url: other.url, events: ['balance.low'] },
        as,
      );
      secrets.add(notSubscribed.body.secret);
      await api.patch(`/v1/clients/${clientId}`, { name: 'Told' }, as);
      const page = readJson(
        auditListAnswer,
        (await api.get(`/v1/clients/${clientId}/audit-events`, as)).body,
      );
      // Its own creation, the second endpoint's, and the rename: each delivered, as the API shows it.
      await eventually(() => receiver.received.length >= 3);
      const delivered = receiver.received.map((r) => parseAs<{ type: string; data: { id: string } }>(r.body));
      expect(delivered.map((d) => d.type)).toEqual(['audit.event', 'audit.event', 'audit.event']);
      const byId = (a: { id: string }, b: { id: string }) => a.id.localeCompare(b.id);
      expect(delivered.map((d) => d.data).sort(byId)).toEqual([...page.data].sort(byId));
      expect(other.received).toEqual([]);
    } finally {
      await receiver.close();
      await other.close();
    }
  });
});

describe('a person’s account log', () => {
  it('sign-ins and a failed one, 2FA on and off, password change and reset, sessions revoked', async () => {
    const user = await signUp(server);
    const { session } = user;
    secrets.add(session);
    const failed = await api.post('/v1/login', { email: user.email, password: 'not-the-password-1' });
    expect(failed.status).toBe(401);
    secrets.add('not-the-password-1');
    const signedIn = await api.post<{ session_token: string }>('/v1/login', {
      email: user.email,
      password: STRONG_PASSWORD,
    });
    expect(signedIn.status).toBe(200);
    secrets.add(signedIn.body.session_token);
    const { secret, recoveryCodes } = await enableTwoFactor(api, session);
    secrets.add(secret);
    for (const c of recoveryCodes) secrets.add(c);
    const code = await totp(secret, 1);
    secrets.add(code);
    expect((await api.post('/v1/2fa/disable', { code }, { token: session })).status).toBe(200);
    const newPassword = 'another-Horse-77';
    secrets.add(newPassword);
    // The settings page's form calls this service (src/portal/settings-page.ts).
    await changePassword(server.deps, {
      userId: user.userId,
      sessionId: 'ses_kept',
      current: STRONG_PASSWORD,
      next: newPassword,
      origin: SYSTEM_ORIGIN,
    });
    await api.post('/v1/password/reset/request', { email: user.email });
    const resetToken = await tokenFromMail(api, user.email, server.v2Url, '/account/reset');
    secrets.add(resetToken);
    const resetPassword = 'third-Horse-99';
    secrets.add(resetPassword);
    expect(
      (await api.post('/v1/password/reset/confirm', { token: resetToken, password: resetPassword })).status,
    ).toBe(200);

    const res = await api.get('/v1/account/audit-events', {
      token: await relogin(user.email, resetPassword),
    });
    expect(res.status).toBe(200);
    const log = readJson(auditListAnswer, res.body)
      .data.map((e) => e.action)
      .reverse();
    expect(log).toEqual([
      'account.signed_in',
      'account.sign_in_failed',
      'account.signed_in',
      'account.2fa_enabled',
      'account.2fa_disabled',
      'account.password_changed',
      'account.password_reset',
      'account.signed_in',
    ]);
    const verify = await api.get('/v1/account/audit-events/verify', {
      token: await relogin(user.email, resetPassword),
    });
    expect(readJson(auditVerifyAnswer, verify.body)).toMatchObject({ valid: true, first_invalid_id: null });
    expect(await actions(user.userId)).toContain('account.signed_in');
  });

  it('signing out other sessions writes account.sessions_revoked; a person reads only their own log', async () => {
    const a = await createUser(server);
    const b = await createUser(server);
    await relogin(a.email, STRONG_PASSWORD);
    // The settings page's "sign out everywhere else" calls this service (src/portal/settings-page.ts).
    expect(await signOutSessions(server.deps.db, a.userId, { allBut: 'ses_kept' }, SYSTEM_ORIGIN)).toBe(2);
    expect(await actions(a.userId)).toEqual(['account.signed_in', 'account.sessions_revoked']);
    const theirs = readJson(
      auditListAnswer,
      (await api.get('/v1/account/audit-events', { token: b.session })).body,
    );
    expect(theirs.data).toEqual([]);
  });
});

async function relogin(email: string, password: string): Promise<string> {
  const res = await api.post<{ session_token: string }>('/v1/login', { email, password });
  expect(res.status).toBe(200);
  secrets.add(res.body.session_token);
  return res.body.session_token;
}

describe('no secret in any event', () => {
  it('every stored event of this file is free of every secret the file handled', async () => {
    const minted = await (async () => {
      const { owner, clientId } = await owned();
      const t = await api.post<MintedToken>('/v1/tokens', { client_id: clientId }, { token: owner.session });
      return t.body.token;
    })();
    secrets.add(minted);
    const events = await allStoredEvents(server.deps.db);
    expect(events.length).toBeGreaterThan(30);
    const text = JSON.stringify(events);
    const found = [...secrets].filter((s) => s.length >= 6 && text.includes(s));
    expect(found).toEqual([]);
    // Nor anything shaped like one: an svc_ token, a signing secret, a JWT, a link with a token.
    expect(text).not.toMatch(/svc_[A-Za-z0-9_-]{20,}|whsec_|eyJ[A-Za-z0-9_-]{8,}\.|[?&]token=/);
  });
});
