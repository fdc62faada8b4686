import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import type { TestUser } from '../helpers/fixtures.js';
import { clientOwner, expectLimited, mails, newEmail } from '../helpers/accounts-support.js';
import { randomToken } from '../../src/ids.js';
import { canonicalMailbox } from '../../src/accounts/trial-addresses.js';
import { POLICIES } from '../../src/ratelimit/limits.js';
import type { CreatedClient, InvitationRow } from '../helpers/answers.js';

// Invitation mail is bounded (docs/limits.md § Invitation mail): per inviter and per recipient mailbox,
// counted when sent (a revoked or replaced invitation counts), 429 RATE_LIMITED with Retry-After over it,
// in the shared store so that every process on one database counts together; and the mail's subject
// carries nothing the inviter wrote.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const api = () => client(server.url);

const owner = (name?: string, orgName?: string) => clientOwner(server, name, orgName);

const invite = (o: { user: TestUser; clientId: string }, email: string, base = server.url) =>
  client(base).post<InvitationRow>(
    `/v1/clients/${o.clientId}/invitations`,
    { email },
    { token: o.user.session },
  );

describe('invitation mail limits', () => {
  it('one re-send per mailbox an hour: re-inviting (which revokes) and revoking do not reset the count', async () => {
    const o = await owner();
    const email = newEmail('flooded');
    const first = await invite(o, email);
    expect(first.status).toBe(200);
    const revoked = await api().delete(`/v1/clients/${o.clientId}/invitations/${first.body.id}`, {
      token: o.user.session,
    });
    expect(revoked.status).toBe(200);
    expect((await invite(o, email)).status).toBe(200); // the one re-send
    for (let i = 0; i < 5; i++) expectLimited(await invite(o, email), 3600);
    expect(await mails(api(), email)).toHaveLength(2);
  });

  it('a few a day per mailbox, whoever invites and however the address is spelled', async () => {
    const local = `victim${randomToken(4)}`;
    const spellings = [`${local}+a@gmail.com`, `${local.slice(0, 3)}.${local.slice(3)}@googlemail.com`];
    const owners = await Promise.all([owner('A'), owner('B'), owner('C')]);
    expect((await invite(owners[0], spellings[0]!)).status).toBe(200);
    expect((await invite(owners[1], spellings[1]!)).status).toBe(200);
    // Another inviter, another spelling: the same mailbox, over its hourly bound.
    expectLimited(await invite(owners[2], `${local}+c@gmail.com`), 3600);
    // An hour later (the hourly count forgotten), the day's bound still holds.
    const mailbox = canonicalMailbox(spellings[0]!);
    expect(mailbox).toBe(`${local}@gmail.com`);
    const day = POLICIES.invitationsPerAddressDay.points;
    for (let sent = 2; sent < day; sent++) {
      await server.deps.limits.invitationsPerAddressHour.reset(mailbox);
      expect((await invite(owners[2], `${local}+${sent}@gmail.com`)).status).toBe(200);
    }
    await server.deps.limits.invitationsPerAddressHour.reset(mailbox);
    expectLimited(await invite(owners[2], `${local}+late@gmail.com`), 24 * 3600);
  });

  it('a few a day per inviter, across their organizations', async () => {
    const o = await owner();
    const second = await api().post<CreatedClient>(
      '/v1/clients',
      { name: 'Other' },
      { token: o.user.session },
    );
    const other = { user: o.user, clientId: second.body.id };
    const perDay = POLICIES.invitationsPerInviter.points;
    for (let i = 0; i < perDay; i++)
      expect((await invite(i % 2 ? o : other, newEmail(`n${i}`))).status, `invitation ${i + 1}`).toBe(200);
    expectLimited(await invite(o, newEmail('one-more')), 24 * 3600);
    expectLimited(await invite(other, newEmail('one-more')), 24 * 3600);
    // Another owner is not held by this one's count.
    expect((await invite(await owner(), newEmail('elsewhere'))).status).toBe(200);
  });

  it('the subject carries nothing of the inviter’s; the body quotes the names, labelled and escaped', async () => {
    const lure = 'Your account is suspended - verify at https://evil.example/<b>now</b>';
    const o = await owner('Support\nTeam', lure);
    const email = newEmail('lured');
    expect((await invite(o, email)).status).toBe(200);
    const [mail] = await mails(api(), email);
    expect(mail!.subject).toBe('You are invited to an organization on svc');
    expect(mail!.subject).not.toMatch(/suspended|evil|Support/);
    expect(mail!.text).toContain(`The organization's name, as its owner wrote it: “${lure}”`);
    // A line break in a name cannot start a line of its own.
    expect(mail!.text).toContain('Invited by (the name on their svc account): “Support Team”');
    expect(mail!.html).toContain('&lt;b&gt;now&lt;/b&gt;');
    expect(mail!.html).not.toContain('<b>now</b>');
  });

  it.runIf(storageMode() === 'postgres')('holds across processes on one database', async () => {
    const second = await startTestServer({ databaseUrl: server.databaseUrl });
    try {
      const o = await owner();
      const email = newEmail('two-processes');
      expect((await invite(o, email)).status).toBe(200);
      expect((await invite(o, email, second.url)).status).toBe(200);
      expectLimited(await invite(o, email, second.url), 3600);
      expectLimited(await invite(o, email), 3600);
    } finally {
      await second.close();
    }
  });
});
