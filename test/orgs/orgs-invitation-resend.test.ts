import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { clientOwner, expectLimited, mails, newEmail } from '../helpers/accounts-support.js';
import { detailOf } from '../helpers/json.js';
import { canonicalMailbox } from '../../src/accounts/trial-addresses.js';
import { POLICIES } from '../../src/ratelimit/limits.js';
import type { InvitationRow } from '../helpers/answers.js';

// Re-sending an open invitation (POST /v1/clients/{id}/invitations/{id}/resend; docs/limits.md §
// Invitation mail): a new link for the same invitation, the old one dead; bounded per invitation and per
// organization on top of every invitation mail's own bounds, 429 RATE_LIMITED with Retry-After past
// either. And the mails a person gets when an owner adds them, changes their role or removes them.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const api = () => client(server.url);

const owner = (name?: string, orgName?: string) => clientOwner(server, name, orgName);
type Owner = Awaited<ReturnType<typeof owner>>;

const invite = (o: Owner, email: string, role = 'member') =>
  api().post<InvitationRow>(
    `/v1/clients/${o.clientId}/invitations`,
    { email, role },
    { token: o.user.session },
  );
const resend = (o: Owner, id: string, as: TestUser = o.user) =>
  api().post<InvitationRow>(`/v1/clients/${o.clientId}/invitations/${id}/resend`, {}, { token: as.session });

/** Forgets the mailbox's and the inviter's counts, so that only the bounds under test can refuse. */
async function forgetMailCounts(o: Owner, email: string) {
  const mailbox = canonicalMailbox(email);
  await server.deps.limits.invitationsPerAddressHour.reset(mailbox);
  await server.deps.limits.invitationsPerAddressDay.reset(mailbox);
  await server.deps.limits.invitationsPerInviter.reset(o.user.userId);
}

const linkOf = (text: string) => /(http\S+\/account\/invitations\/accept\?token=(\S+))/.exec(text)!;

describe('re-sending an invitation', () => {
  it('mails a new link for the same invitation; the old link stops working; 7 days from now', async () => {
    const o = await owner();
    const email = newEmail('again');
    const first = await invite(o, email, 'viewer');
    expect(first.status).toBe(200);
    const [oldMail] = await mails(api(), email);
    const oldToken = decodeURIComponent(linkOf(oldMail!.text)[2]!);

    const again = await resend(o, first.body.id);
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.body).toMatchObject({ id: first.body.id, email, role: 'viewer', status: 'pending' });
    expect(again.body.expires_at).toBeGreaterThanOrEqual(first.body.expires_at);
    const sent = await mails(api(), email);
    expect(sent).toHaveLength(2);
    const newToken = decodeURIComponent(linkOf(sent[0]!.text)[2]!);
    expect(newToken).not.toBe(oldToken);

    // The invitee registers with the address and accepts: the old token opens nothing, the new one joins.
    const invitee = await createUser(server, { email, name: 'Ivy' });
    const withOld = await api().post(
      '/v1/invitations/accept',
      { token: oldToken },
      { token: invitee.session },
    );
    expect(withOld.status).toBe(404);
    const withNew = await api().post<{ client: { id: string; role: string } }>(
      '/v1/invitations/accept',
      { token: newToken },
      { token: invitee.session },
    );
    expect(withNew.status, JSON.stringify(withNew.body)).toBe(200);
    expect(withNew.body.client).toMatchObject({ id: o.clientId, role: 'viewer' });
    // Accepted: nothing to send again.
    const used = await resend(o, first.body.id);
    expect(used.status).toBe(409);
    expect(detailOf(used.body).code).toBe('INVITATION_USED');
  });

  it('three re-sends per invitation, then 429 and no mail', async () => {
    const o = await owner();
    const email = newEmail('thrice');
    const first = await invite(o, email);
    const most = POLICIES.invitationResendsPerInvitation.points;
    expect(most).toBe(3);
    for (let i = 0; i < most; i++) {
      await forgetMailCounts(o, email);
      expect((await resend(o, first.body.id)).status, `re-send ${i + 1}`).toBe(200);
    }
    await forgetMailCounts(o, email);
    expectLimited(await resend(o, first.body.id), POLICIES.invitationResendsPerInvitation.durationSeconds);
    expect(await mails(api(), email)).toHaveLength(1 + most);
  });

  it("twenty re-sends a day per organization, then 429 (another organization's are its own)", async () => {
    const o = await owner();
    const perOrg = POLICIES.invitationResendsPerOrg.points;
    let sent = 0;
    let n = 0;
    while (sent < perOrg) {
      const email = newEmail(`org${n++}`);
      await forgetMailCounts(o, email);
      const inv = await invite(o, email);
      expect(inv.status).toBe(200);
      for (let i = 0; i < POLICIES.invitationResendsPerInvitation.points && sent < perOrg; i++, sent++) {
        await forgetMailCounts(o, email);
        expect((await resend(o, inv.body.id)).status, `re-send ${sent + 1}`).toBe(200);
      }
    }
    const email = newEmail('over');
    await forgetMailCounts(o, email);
    const fresh = await invite(o, email);
    await forgetMailCounts(o, email);
    expectLimited(await resend(o, fresh.body.id), 24 * 3600);
    expect(await mails(api(), email)).toHaveLength(1);
    // Another organization of another owner re-sends as before.
    const other = await owner('Otto');
    const theirs = await invite(other, newEmail('theirs'));
    await forgetMailCounts(other, theirs.body.email);
    expect((await resend(other, theirs.body.id)).status).toBe(200);
  });

  it('a revoked one is 410, another organization’s 404, a member’s attempt 403', async () => {
    const o = await owner();
    const inv = await invite(o, newEmail('gone'));
    await api().delete(`/v1/clients/${o.clientId}/invitations/${inv.body.id}`, { token: o.user.session });
    const revoked = await resend(o, inv.body.id);
    expect(revoked.status).toBe(410);
    expect(detailOf(revoked.body).code).toBe('INVITATION_REVOKED');

    const other = await owner('Otto');
    const theirs = await invite(other, newEmail('theirs'));
    expect((await resend(o, theirs.body.id)).status).toBe(404);
    expect((await resend(o, 'inv_nosuch')).status).toBe(404);

    const mia = await createUser(server, { name: 'Mia' });
    expect(
      (await api().post(`/v1/clients/${o.clientId}/members`, { email: mia.email }, { token: o.user.session }))
        .status,
    ).toBe(200);
    const open = await invite(o, newEmail('open'));
    expect((await resend(o, open.body.id, mia)).status).toBe(403);
  });
});

describe('mails to people added, re-roled and removed', () => {
  it('added, role changed, removed: one mail each, naming the organization as its owner wrote it', async () => {
    const o = await owner('Olga', 'Lab\nof <b>Things</b>');
    const mia = await createUser(server, { name: 'Mia' });
    const base = `/v1/clients/${o.clientId}/members`;
    const added = await api().post(base, { email: mia.email, role: 'viewer' }, { token: o.user.session });
    expect(added.status).toBe(200);
    let inbox = await mails(api(), mia.email);
    const addedMail = inbox.find((m) => m.subject === 'You were added to an organization on svc')!;
    expect(addedMail.text).toContain(
      "The organization's name, as its owner wrote it: “Lab of <b>Things</b>”",
    );
    expect(addedMail.text).toContain('added your account as viewer');
    expect(addedMail.text).toContain(`/account/clients/${o.clientId}`);
    expect(addedMail.html).not.toContain('<b>Things');

    const patch = (role: string) => api().patch(`${base}/${mia.userId}`, { role }, { token: o.user.session });
    expect((await patch('member')).status).toBe(200);
    expect((await patch('member')).status).toBe(200); // no change: no mail
    inbox = await mails(api(), mia.email);
    const roleMails = inbox.filter((m) => m.subject === 'Your role in an organization on svc changed');
    expect(roleMails).toHaveLength(1);
    expect(roleMails[0]!.text).toContain('from viewer to member');

    expect((await api().delete(`${base}/${mia.userId}`, { token: o.user.session })).status).toBe(200);
    inbox = await mails(api(), mia.email);
    expect(inbox.filter((m) => m.subject === 'You were removed from an organization on svc')).toHaveLength(1);
  });

  it('a person who leaves gets no mail; past the mailbox bound the change is made without one', async () => {
    const o = await owner();
    const max = await createUser(server, { name: 'Max' });
    const base = `/v1/clients/${o.clientId}/members`;
    expect((await api().post(base, { email: max.email }, { token: o.user.session })).status).toBe(200);
    const left = await api().post(`/v1/clients/${o.clientId}/leave`, {}, { token: max.session });
    expect(left.status).toBe(200);
    expect((await mails(api(), max.email)).filter((m) => /removed/.test(m.subject))).toHaveLength(0);

    // Added and removed again and again: the mailbox gets at most its bound a day.
    const bound = POLICIES.memberMailsPerAddress.points;
    for (let i = 0; i < bound; i++) {
      expect((await api().post(base, { email: max.email }, { token: o.user.session })).status).toBe(200);
      expect((await api().delete(`${base}/${max.userId}`, { token: o.user.session })).status).toBe(200);
    }
    const memberMails = (await mails(api(), max.email)).filter((m) => /organization on svc/.test(m.subject));
    expect(memberMails).toHaveLength(bound);
  });
});
