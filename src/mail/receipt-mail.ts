import type { MailMessage } from './mailer.js';
import { escapeHtml } from './escape.js';
import { tokensAndMoney, usdOfCents } from '../billing/par.js';

// The receipt an organization's owner gets for every paid top-up, bought at a checkout or charged by auto
// top-up (docs/billing.md "Receipts"). Plain text first, like the account mails (./templates.ts); the
// organization's name is written by people and is escaped in the HTML part.

export interface TopupReceiptMailInput {
  to: string;
  orgName: string;
  paidCents: number;
  /** The tokens granted for it, at par. */
  credits: number;
  /** Charged by auto top-up rather than bought at a checkout. */
  auto: boolean;
  /** The organization's billing page (its invoices). */
  link: string;
}

export function topupReceiptMail(m: TopupReceiptMailInput): MailMessage {
  const what = m.auto ? 'An automatic top-up' : 'A top-up';
  const lines = [
    `${what} of ${usdOfCents(m.paidCents)} for "${m.orgName}" was paid: ${tokensAndMoney(m.credits)} added to its balance.`,
    `Its invoice and the organization's transactions are on the billing page: ${m.link}`,
  ];
  return {
    to: m.to,
    subject: `Receipt: ${usdOfCents(m.paidCents)} for ${m.orgName}`,
    text: `${lines.join('\n\n')}\n`,
    html: lines.map((line) => `<p>${escapeHtml(line)}</p>`).join('\n'),
  };
}
