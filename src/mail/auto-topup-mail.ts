import type { MailMessage } from './mailer.js';
import { escapeHtml } from './escape.js';
import { usdOfCents } from '../billing/par.js';

// The mail to an organization's owner when an automatic top-up was declined (docs/billing.md, "Auto
// top-up"). Plain text first, like the account mails (./templates.ts); the organization's name is
// written by people and is escaped in the HTML part.

export interface AutoTopupFailedMailInput {
  to: string;
  orgName: string;
  amountCents: number;
  /** The processor's reason for the decline. */
  reason: string;
  /** The organization's billing page. */
  link: string;
}

export function autoTopupFailedMail(m: AutoTopupFailedMailInput): MailMessage {
  const lines = [
    `The automatic top-up of ${usdOfCents(m.amountCents)} for "${m.orgName}" was not paid: ${m.reason}.`,
    'Auto top-up is now off for this client. Update the payment method, then turn it on again on the ' +
      `billing page: ${m.link}`,
  ];
  return {
    to: m.to,
    subject: 'Auto top-up failed',
    text: `${lines.join('\n\n')}\n`,
    html: lines.map((line) => `<p>${escapeHtml(line)}</p>`).join('\n'),
  };
}
