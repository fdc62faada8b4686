import type { MailMessage } from './mailer.js';
import { escapeHtml } from './escape.js';

// The invitation mail (docs/orgs-tokens-device.md § Invitations). Plain text first, like the account mails
// (./templates.ts). The organization's and the inviter's names are written by the inviter, and a mail
// carrying them could be made to read like svc's own words ("Your account is suspended - verify at …"):
// the subject is svc's text alone, and the body quotes each name on a line of its own, labelled as what
// it is. The HTML part escapes everything it interpolates.

/** A name on one line, in quotes: line breaks and other controls cannot start a paragraph of its own. */
const quoted = (name: string): string => `“${name.replace(/[\p{Cc}\u2028\u2029]+/gu, ' ').trim()}”`;

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
    `You are invited to join an organization on svc, as ${m.role}.`,
    `The organization's name, as its owner wrote it: ${quoted(m.orgName)}`,
    `Invited by (the name on their svc account): ${quoted(m.inviterName)}`,
    `Open the link below, then sign in or create an account with this e-mail address (${m.to}) to accept. The link works once and expires in ${m.expiresInDays} days.`,
    'If you do not know this person, ignore this mail: nothing happens without your answer. svc never asks you to verify or unlock anything through an invitation.',
  ];
  const text = ['Hello,', '', ...lines, '', m.link, ''].join('\n');
  const html = [
    '<p>Hello,</p>',
    ...lines.map((l) => `<p>${escapeHtml(l)}</p>`),
    `<p><a href="${escapeHtml(m.link)}">See the invitation</a></p>`,
    `<p style="color:#666">${escapeHtml(m.link)}</p>`,
  ].join('\n');
  return { to: m.to, subject: INVITATION_SUBJECT, text, html };
}

/** The same for every invitation: nothing in it comes from the inviter. */
export const INVITATION_SUBJECT = 'You are invited to an organization on svc';
