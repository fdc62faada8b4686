import nodemailer from 'nodemailer';
import type { Db } from '../db/client.js';
import { mailOutbox } from '../db/schema.js';

// Mail goes to the dev outbox unless SMTP_URL is configured (STYLE: optional parts get a real default).

export interface MailMessage {
  to: string;
  subject: string;
  text: string;
  html: string;
}

export interface Mailer {
  send(message: MailMessage): Promise<void>;
}

export function createOutboxMailer(db: Db): Mailer {
  return {
    async send(message) {
      await db.insert(mailOutbox).values(message);
    },
  };
}

export function createSmtpMailer(smtpUrl: string, from: string): Mailer {
  // Bounded waits: nodemailer's defaults (minutes) would hold a registration request that long when
  // the relay hangs. Query parameters of SMTP_URL still override these.
  const transport = nodemailer.createTransport({
    url: smtpUrl,
    connectionTimeout: 10_000,
    greetingTimeout: 10_000,
    socketTimeout: 30_000,
  });
  return {
    async send(message) {
      await transport.sendMail({ from, ...message });
    },
  };
}
