import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eq } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { assertAuthChecks } from '../helpers/auth-checks.js';
import { mails, newEmail, signUp, tokenFromMail } from '../helpers/accounts-support.js';
import { orgInvitations } from '../../src/db/schema.js';
import { hmacSecret } from '../../src/crypto/hash.js';
import { anyOf, detailOf, matching, openAiErrorOf } from '../helpers/json.js';
import type {
  ClientRow,
  CreatedClient,
  MemberRow,
  Page,
  Registered,
  Verified,
  InvitationAccepted,
  InvitationRow,
} from '../helpers/answers.js';

// An organization's people: rename, change a member's role, leave, and invitations
// by e-mail (single-use, expiring, revocable, hashed at rest, wrong tokens limited). Each rule for the
// owner, a member, a viewer and an outsider.

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

/** An owner with a second (non-default) org holding a member and a viewer, and an outsider. */
async function team() {
  const owner = await createUser(server, { name: 'Olga' });
  const created = await api.post<CreatedClient>('/v1/clients', { name: 'Team' }, { token: owner.session });
  const org = { clientId: created.body.id, orgKey: created.body.id.slice(7) };
  const member = await createUser(server, { name: 'Mia' });
  const viewer = await createUser(server, { name: 'Vic' });
  const outsider = await createUser(server, { name: 'Otto' });
  await addMember(server, org.orgKey, member.userId, 'member');
  await addMember(server, org.orgKey, viewer.userId, 'viewer');
  return { owner, member, viewer, outsider, org };
}

const invite = (clientId: string, as: TestUser, body: Record<string, unknown>) =>
  api.post<InvitationRow>(`/v1/clients/${clientId}/invitations`, body, { token: as.session });
const accept = (session: string, token: string) =>
  api.post<InvitationAccepted>('/v1/invitations/accept', { token }, { token: session });
const inviteToken = (email: string) => tokenFromMail(api, email, server.v2Url, '/account/invitations/accept');

describe('auth checks on the people routes', () => {
  it.each([
    { method: 'PATCH', path: '/v1/clients/client_abcdefgh', body: { name: 'x' } },
    { method: 'PATCH', path: '/v1/clients/client_abcdefgh/members/usr_x', body: { role: 'viewer' } },
    { method: 'POST', path: '/v1/clients/client_abcdefgh/leave' },
    { method: 'GET', path: '/v1/clients/client_abcdefgh/invitations' },
    { method: 'POST', path: '/v1/clients/client_abcdefgh/invitations', body: { email: 'a@example.test' } },
    { method: 'DELETE', path: '/v1/clients/client_abcdefgh/invitations/inv_x' },
  ] as const)('%o', async (route) => {
    await assertAuthChecks(server, route);
  });
  it('accept takes a session only', async () => {
    await assertAuthChecks(
      server,
      { method: 'POST', path: '/v1/invitations/accept', body: { token: 'x' } },
      { accepts: 'session' },
    );
  });
});

describe('PATCH /v1/clients/{id}: rename', () => {
  it('the owner renames (either spelling, the default client too); others are refused', async () => {
    const { owner, member, viewer, outsider, org } = await team();
    const res = await api.patch(
      `/v1/clients/org_${org.orgKey}`,
      { name: '  Research  ' },
      { token: owner.session },
    );
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: org.clientId,
      name: 'Research',
      owner_id: owner.userId,
      created_at: anyOf(Number),
    });
    const list = await api.get<Page<ClientRow>>('/v1/clients', { token: member.session });
    expect(list.body.data.find((c) => c.id === org.clientId)!.name).toBe('Research');
    for (const who of [member, viewer, outsider]) {
      const refused = await api.patch(
        `/v1/clients/${org.clientId}`,
        { name: 'Mine' },
        { token: who.session },
      );
      expect(refused.status).toBe(403);
      expect(detailOf(refused.body).code).toBe('NO_ACCESS');
    }
    expect(
      (await api.patch(`/v1/clients/${owner.clientId}`, { name: 'Home' }, { token: owner.session })).status,
    ).toBe(200);
    for (const body of [{}, { name: '' }, { name: '   ' }, { name: 'x'.repeat(101) }, { name: 7 }]) {
      const bad = await api.patch(`/v1/clients/${org.clientId}`, body, { token: owner.session });
      expect(bad.status, JSON.stringify(body)).toBe(400);
      expect(detailOf(bad.body).code).toBe('VALIDATION_ERROR');
    }
    expect(
      (await api.patch('/v1/clients/client_nosuchorg', { name: 'x' }, { token: owner.session })).status,
    ).toBe(404);
  });

  it("the registration's default client says it is personal", async () => {
    const reg = await api.post<Registered>('/v1/register', {
      email: newEmail(),
      name: 'Grace',
      password: 'correct-Horse-9',
    });
    expect(reg.body.client.name).toBe("Grace's personal organization");
  });
});

describe('PATCH /v1/clients/{id}/members/{user_id}: role', () => {
  it('the owner makes a member a viewer and back; the viewer can no longer spend', async () => {
    const { owner, member, org } = await team();
    const res = await api.patch(
      `/v1/clients/${org.clientId}/members/${member.userId}`,
      { role: 'viewer' },
      { token: owner.session },
    );
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      user_id: member.userId,
      email: member.email,
      name: 'Mia',
      role: 'viewer',
      created_at: anyOf(Number),
    });
    // Spending reads the role live (CONTRACT §7): the member's own token stops spending at once.
    const key = await createApiToken(server, member, org.orgKey);
    const chat = await api.post(
      '/v1/chat/completions',
      { model: 'svc-local', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 },
      { token: key.secret },
    );
    expect(chat.status).toBe(403);
    expect(openAiErrorOf(chat.body).code).toBe('viewer_cannot_spend');
    const back = await api.patch<MemberRow>(
      `/v1/clients/${org.clientId}/members/${member.userId}`,
      { role: 'member' },
      { token: owner.session },
    );
    expect(back.body.role).toBe('member');
  });

  it("refuses members, viewers and outsiders, the owner's own role, 'owner', and unknown people", async () => {
    const { owner, member, viewer, outsider, org } = await team();
    const path = `/v1/clients/${org.clientId}/members/${viewer.userId}`;
    for (const who of [member, viewer, outsider]) {
      const refused = await api.patch(path, { role: 'member' }, { token: who.session });
      expect(refused.status).toBe(403);
      expect(detailOf(refused.body).code).toBe('NO_ACCESS');
    }
    const ownRole = await api.patch(
      `/v1/clients/${org.clientId}/members/${owner.userId}`,
      { role: 'viewer' },
      { token: owner.session },
    );
    expect(ownRole.status).toBe(400);
    expect(detailOf(ownRole.body).code).toBe('CANNOT_CHANGE_OWNER');
    expect((await api.patch(path, { role: 'owner' }, { token: owner.session })).status).toBe(400);
    expect((await api.patch(path, {}, { token: owner.session })).status).toBe(400);
    const stranger = await api.patch(
      `/v1/clients/${org.clientId}/members/${outsider.userId}`,
      { role: 'viewer' },
      { token: owner.session },
    );
    expect(stranger.status).toBe(404);
  });
});

describe('POST /v1/clients/{id}/leave', () => {
  it('a member leaves: membership gone, their token for that client revoked; the owner cannot leave', async () => {
    const { owner, member, viewer, outsider, org } = await team();
    const key = await createApiToken(server, member, org.orgKey);
    expect((await api.get<Verified>('/v1/auth/verify', { token: key.secret })).status).toBe(200);
    const res = await api.post(`/v1/clients/${org.clientId}/leave`, undefined, { token: member.session });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ left: true });
    expect((await api.get<Verified>('/v1/auth/verify', { token: key.secret })).status).toBe(401);
    const members = await api.get<Page<MemberRow>>(`/v1/clients/${org.clientId}/members`, {
      token: owner.session,
    });
    expect(members.body.data.map((m: { user_id: string }) => m.user_id)).toEqual([
      owner.userId,
      viewer.userId,
    ]);
    // Gone means gone: a second leave, like an outsider's, is 403.
    expect(
      (await api.post(`/v1/clients/${org.clientId}/leave`, undefined, { token: member.session })).status,
    ).toBe(403);
    expect(
      (await api.post(`/v1/clients/${org.clientId}/leave`, undefined, { token: outsider.session })).status,
    ).toBe(403);
    expect(
      (await api.post(`/v1/clients/${org.clientId}/leave`, undefined, { token: viewer.session })).status,
    ).toBe(200);
    const ownerLeaves = await api.post(`/v1/clients/${org.clientId}/leave`, undefined, {
      token: owner.session,
    });
    expect(ownerLeaves.status).toBe(400);
    expect(detailOf(ownerLeaves.body).code).toBe('OWNER_CANNOT_LEAVE');
  });
});

describe('invitations', () => {
  it('invites a person with no account; they register, verify and accept; the link is single-use', async () => {
    const { owner, org } = await team();
    const email = newEmail('invitee');
    // The document's rule stays: POST …/members takes only a registered account.
    const direct = await api.post<MemberRow>(
      `/v1/clients/${org.clientId}/members`,
      { email },
      { token: owner.session },
    );
    expect(direct.status).toBe(404);
    expect(detailOf(direct.body).code).toBe('USER_NOT_FOUND');

    const res = await invite(org.clientId, owner, { email: `  ${email.toUpperCase()} `, role: 'viewer' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      id: matching(/^inv_[a-z2-7]{26}$/),
      client_id: org.clientId,
      email,
      role: 'viewer',
      status: 'pending',
      created_at: anyOf(Number),
      expires_at: res.body.created_at + 7 * 24 * 3600,
      accepted_at: null,
      revoked_at: null,
    });
    const [mail] = await mails(api, email);
    // The subject is svc's alone; the names are quoted in the body, each labelled as what it is.
    expect(mail!.subject).toBe('You are invited to an organization on svc');
    expect(mail!.text).toContain("The organization's name, as its owner wrote it: “Team”");
    expect(mail!.text).toContain('Invited by (the name on their svc account): “Olga”');
    const token = await inviteToken(email);
    // Hashed at rest: the stored row holds the HMAC, never the token.
    const [row] = await server.deps.db
      .select()
      .from(orgInvitations)
      .where(eq(orgInvitations.id, res.body.id));
    expect(row!.tokenHash).toBe(hmacSecret(server.deps.keys.hmac, token));
    expect(JSON.stringify(row)).not.toContain(token);
    const listed = await api.get<Page<InvitationRow>>(`/v1/clients/${org.clientId}/invitations`, {
      token: owner.session,
    });
    expect(listed.body.data).toEqual([res.body]);

    const invitee = await signUp(server, { email });
    const accepted = await accept(invitee.session, token);
    expect(accepted.status).toBe(200);
    expect(accepted.body).toEqual({ client: { id: org.clientId, name: 'Team', role: 'viewer' } });
    const clients = await api.get<Page<ClientRow>>('/v1/clients', { token: invitee.session });
    expect(clients.body.data.map((c: { id: string; role: string }) => [c.id, c.role])).toContainEqual([
      org.clientId,
      'viewer',
    ]);
    const reuse = await accept(invitee.session, token);
    expect(reuse.status).toBe(409);
    expect(detailOf(reuse.body).code).toBe('INVITATION_USED');
    const after = await api.get<Page<InvitationRow>>(`/v1/clients/${org.clientId}/invitations`, {
      token: owner.session,
    });
    expect(after.body.data[0]).toMatchObject({ status: 'accepted', accepted_at: anyOf(Number) });
    // An accepted invitation is not revoked (the member is removed instead).
    const late = await api.delete(`/v1/clients/${org.clientId}/invitations/${res.body.id}`, {
      token: owner.session,
    });
    expect(late.status).toBe(409);
  });

  it('only the owner invites, lists and revokes; a revoked link answers 410', async () => {
    const { owner, member, viewer, outsider, org } = await team();
    const email = newEmail('revoked');
    const created = await invite(org.clientId, owner, { email });
    for (const who of [member, viewer, outsider]) {
      expect((await invite(org.clientId, who, { email: newEmail() })).status).toBe(403);
      expect(
        (
          await api.get<Page<InvitationRow>>(`/v1/clients/${org.clientId}/invitations`, {
            token: who.session,
          })
        ).status,
      ).toBe(403);
      const del = await api.delete(`/v1/clients/${org.clientId}/invitations/${created.body.id}`, {
        token: who.session,
      });
      expect(del.status).toBe(403);
    }
    // Another owner's org cannot reach this invitation: 404 like an unknown one.
    const other = await api.delete(`/v1/clients/${outsider.clientId}/invitations/${created.body.id}`, {
      token: outsider.session,
    });
    expect(other.status).toBe(404);
    const token = await inviteToken(email);
    const revoked = await api.delete(`/v1/clients/${org.clientId}/invitations/${created.body.id}`, {
      token: owner.session,
    });
    expect(revoked.status).toBe(200);
    expect(revoked.body).toMatchObject({ status: 'revoked', revoked_at: anyOf(Number) });
    const invitee = await signUp(server, { email });
    const res = await accept(invitee.session, token);
    expect(res.status).toBe(410);
    expect(detailOf(res.body).code).toBe('INVITATION_REVOKED');
    expect(
      (await api.get<Page<MemberRow>>(`/v1/clients/${org.clientId}/members`, { token: invitee.session }))
        .status,
    ).toBe(403);
  });

  it('an expired link answers 410; inviting again replaces the old link', async () => {
    const { owner, org } = await team();
    const email = newEmail('expired');
    const first = await invite(org.clientId, owner, { email });
    const oldToken = await inviteToken(email);
    await server.deps.db
      .update(orgInvitations)
      .set({ expiresAt: new Date(Date.now() - 1000) })
      .where(eq(orgInvitations.id, first.body.id));
    const invitee = await signUp(server, { email });
    const expired = await accept(invitee.session, oldToken);
    expect(expired.status).toBe(410);
    expect(detailOf(expired.body).code).toBe('INVITATION_EXPIRED');

    const second = await invite(org.clientId, owner, { email, role: 'member' });
    expect(second.status).toBe(200);
    const newToken = await inviteToken(email);
    expect(newToken).not.toBe(oldToken);
    const listed = await api.get<Page<InvitationRow>>(`/v1/clients/${org.clientId}/invitations`, {
      token: owner.session,
    });
    expect(listed.body.data.map((i) => i.status)).toEqual(['pending', 'revoked']);
    expect((await accept(invitee.session, newToken)).body.client.role).toBe('member');
    // Now a member: inviting the address again is 409.
    const again = await invite(org.clientId, owner, { email });
    expect(again.status).toBe(409);
    expect(detailOf(again.body).code).toBe('ALREADY_MEMBER');
  });

  it('the account must have the invited address; wrong tokens are limited per person (429)', async () => {
    const { owner, org } = await team();
    const email = newEmail('bound');
    await invite(org.clientId, owner, { email });
    const token = await inviteToken(email);
    const someoneElse = await signUp(server);
    const wrongPerson = await accept(someoneElse.session, token);
    expect(wrongPerson.status).toBe(403);
    expect(detailOf(wrongPerson.body).code).toBe('INVITATION_FOR_ANOTHER_EMAIL');

    const guesser = await signUp(server);
    const forged = token.slice(0, -2) + (token.endsWith('AA') ? 'BB' : 'AA');
    for (let i = 0; i < 10; i++) {
      const wrong = await accept(guesser.session, i % 2 ? forged : 'not-a-token');
      expect(wrong.status).toBe(404);
      expect(detailOf(wrong.body).code).toBe('INVITATION_NOT_FOUND');
    }
    const blocked = await accept(guesser.session, forged);
    expect(blocked.status).toBe(429);
    expect(detailOf(blocked.body).code).toBe('RATE_LIMITED');
    expect(Number(blocked.headers.get('retry-after'))).toBeGreaterThan(0);
    // The right person is not blocked by someone else's guesses.
    const invitee = await signUp(server, { email });
    expect((await accept(invitee.session, token)).status).toBe(200);
  });

  it('bad input is 400; an existing member is 409; a deleted client’s link opens nothing', async () => {
    const { owner, member, org } = await team();
    for (const body of [{}, { email: 'not-an-email' }, { email: 'a@example.test', role: 'owner' }]) {
      const bad = await invite(org.clientId, owner, body);
      expect(bad.status, JSON.stringify(body)).toBe(400);
      expect(detailOf(bad.body).code).toBe('VALIDATION_ERROR');
    }
    expect(detailOf((await invite(org.clientId, owner, { email: member.email })).body).code).toBe(
      'ALREADY_MEMBER',
    );
    for (const q of ['limit=0', 'limit=101', 'offset=-1'])
      expect(
        (await api.get(`/v1/clients/${org.clientId}/invitations?${q}`, { token: owner.session })).status,
      ).toBe(400);
    expect((await api.post('/v1/invitations/accept', {}, { token: member.session })).status).toBe(400);

    const email = newEmail('gone');
    await invite(org.clientId, owner, { email });
    const token = await inviteToken(email);
    expect((await api.delete(`/v1/clients/${org.clientId}`, { token: owner.session })).status).toBe(200);
    const invitee = await signUp(server, { email });
    const res = await accept(invitee.session, token);
    expect(res.status).toBe(404);
    expect(detailOf(res.body).code).toBe('INVITATION_NOT_FOUND');
  });
});
