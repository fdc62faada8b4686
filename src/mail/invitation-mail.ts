import type { MailMessage } from './mailer.js';

// The invitation mail (issue 16 item 5). Plain text first, like the account mails (./templates.ts); the
// HTML part escapes everything it interpolates: the organization's and the inviter's names are written
// by people.

const escapeHtml = (s: string): string =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

export interface InvitationMailInput {
  to: string;
  inviterName: string;
  orgName: string;
  role: string;
  link: string;
  expiresInDays: number;
}

export function invitationMail(m: InvitationMailInput): MailMessage {
  const lines = [
    `${m.inviterName} invited you to join the organization “${m.orgName}” on svc as ${m.role}.`,
    `Open the link below, then sign in or create an account with this e-mail address (${m.to}) to accept. The link works once and expires in ${m.expiresInDays} days.`,
    'If you do not know this person, ignore this mail: nothing happens without your answer.',
  ];
  const text = ['Hello,', '', ...lines, '', m.link, ''].join('\n');
  const html = [
    '<p>Hello,</p>',
    ...lines.map((l) => `<p>${escapeHtml(l)}</p>`),
    `<p><a href="${escapeHtml(m.link)}">See the invitation</a></p>`,
    `<p style="color:#666">${escapeHtml(m.link)}</p>`,
  ].join('\n');
  return { to: m.to, subject: `Invitation to join ${m.orgName} on svc`, text, html };
}
