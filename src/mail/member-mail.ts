import type { MailMessage } from './mailer.js';
import { escapeHtml } from './escape.js';

// The mails a person gets when an owner adds them to an organization, changes their role in it or
// removes them (docs/orgs-tokens-device.md § Members). As with invitations (./invitation-mail.ts), the
// organization's name is written by its owner: the subject is svc's text alone, and the body quotes the
// name on a labelled line of its own, so it cannot read like svc's own words.

const quoted = (name: string): string => `“${name.replace(/[\p{Cc}\u2028\u2029]+/gu, ' ').trim()}”`;

export type MemberChange =
  { kind: 'added'; role: string } | { kind: 'role_changed'; from: string; to: string } | { kind: 'removed' };

export interface MemberMailInput {
  to: string;
  name: string;
  orgName: string;
  change: MemberChange;
  /** The organization's members page (added, re-roled) or the person's account page (removed). */
  link: string;
}

export const MEMBER_MAIL_SUBJECTS = {
  added: 'You were added to an organization on svc',
  role_changed: 'Your role in an organization on svc changed',
  removed: 'You were removed from an organization on svc',
} as const;

function what(change: MemberChange): string[] {
  switch (change.kind) {
    case 'added':
      return [
        `Its owner added your account as ${change.role}.`,
        change.role === 'viewer'
          ? 'As viewer you read its projects, usage and billing; you do not spend its tokens.'
          : 'As member you use its tokens and projects; get a credential with `svc login` or on the page below.',
      ];
    case 'role_changed':
      return [
        `Its owner changed your role from ${change.from} to ${change.to}. It applies from your next request.`,
      ];
    case 'removed':
      return [
        'Its owner removed your account from it. Your API tokens and sign-ins for that organization stopped working at once.',
      ];
  }
}

export function memberMail(m: MemberMailInput): MailMessage {
  const lines = [
    `The organization's name, as its owner wrote it: ${quoted(m.orgName)}`,
    ...what(m.change),
    ...(m.change.kind === 'removed'
      ? []
      : ['If you did not expect this, you can leave the organization from its settings page.']),
  ];
  const text = [`Hello ${m.name},`, '', ...lines, '', m.link, ''].join('\n');
  const html = [
    `<p>Hello ${escapeHtml(m.name)},</p>`,
    ...lines.map((l) => `<p>${escapeHtml(l)}</p>`),
    `<p><a href="${escapeHtml(m.link)}">${m.change.kind === 'removed' ? 'Your account' : 'The organization'}</a></p>`,
    `<p style="color:#666">${escapeHtml(m.link)}</p>`,
  ].join('\n');
  return { to: m.to, subject: MEMBER_MAIL_SUBJECTS[m.change.kind], text, html };
}
