import type { MailMessage } from './mailer.js';
import { escapeHtml } from './escape.js';

// The account mails (CONTRACT §4). Plain text first (it is what the dev outbox shows and what a
// terminal user copies from); the HTML part escapes everything it interpolates.

function message(
  to: string,
  subject: string,
  greeting: string,
  lines: string[],
  link: string,
  linkLabel: string,
): MailMessage {
  const text = [greeting, '', ...lines, '', link, ''].join('\n');
  const html = [
    `<p>${escapeHtml(greeting)}</p>`,
    ...lines.map((l) => `<p>${escapeHtml(l)}</p>`),
    `<p><a href="${escapeHtml(link)}">${escapeHtml(linkLabel)}</a></p>`,
    `<p style="color:#666">${escapeHtml(link)}</p>`,
  ].join('\n');
  return { to, subject, text, html };
}

export function verificationMail(to: string, name: string, link: string): MailMessage {
  return message(
    to,
    'Verify your e-mail address',
    `Hello ${name},`,
    [
      'Confirm this address to finish creating your svc account. The link works once and expires in 24 hours.',
    ],
    link,
    'Verify my e-mail address',
  );
}

export function passwordResetMail(to: string, name: string, link: string): MailMessage {
  return message(
    to,
    'Reset your password',
    `Hello ${name},`,
    [
      'Someone asked to reset the password of your svc account. If it was you, choose a new password with the link below; it works once and expires in 1 hour. Setting it signs you out everywhere.',
      'If it was not you, ignore this mail: your password stays as it is.',
    ],
    link,
    'Choose a new password',
  );
}
