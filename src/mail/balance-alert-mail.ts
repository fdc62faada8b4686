import type { MailMessage } from './mailer.js';
import { escapeHtml } from './escape.js';
import { tokensAndMoney as tokens } from '../billing/par.js';

// The low-balance and exhausted alerts to an organization's owner. Plain text first,
// like the account mails (./templates.ts); the HTML part escapes everything it interpolates (the
// organization's name is written by people).

export interface BalanceAlertMailInput {
  to: string;
  orgName: string;
  kind: 'low' | 'exhausted';
  threshold: number;
  balance: number;
  /** The organization's billing page. */
  link: string;
}

export function balanceAlertMail(m: BalanceAlertMailInput): MailMessage {
  const lines =
    m.kind === 'low'
      ? [
          `The token balance of “${m.orgName}” fell below ${tokens(m.threshold)}; ${tokens(m.balance)} left.`,
          'Top up or raise its allocation before it runs out: at 0, model calls fail with 402 insufficient_credits.',
        ]
      : [
          `“${m.orgName}” has run out of tokens (balance ${tokens(m.balance)}): model calls now fail with 402 insufficient_credits.`,
          'Top up or raise its allocation to resume.',
        ];
  const subject =
    m.kind === 'low'
      ? `${m.orgName}: below ${tokens(m.threshold)}`
      : `${m.orgName}: out of tokens, calls now fail with 402`;
  const text = ['Hello,', '', ...lines, '', m.link, ''].join('\n');
  const html = [
    '<p>Hello,</p>',
    ...lines.map((l) => `<p>${escapeHtml(l)}</p>`),
    `<p><a href="${escapeHtml(m.link)}">Open billing</a></p>`,
    `<p style="color:#666">${escapeHtml(m.link)}</p>`,
  ].join('\n');
  return { to: m.to, subject, text, html };
}
