import nodemailer from 'nodemailer';
import type { Db } from '../db/client.js';
import { mailOutbox } from '../db/schema.js';
import { COMMON_ERRORS, UNAVAILABLE_RETRY_AFTER_SECONDS, errorOf } from '../http/errors.js';

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

/** The process's mailer: SMTP when SMTP_URL is set, else the dev outbox in the database (GET /dev/mail). */
export function mailerFor(config: { smtpUrl?: string; mailFrom: string }, db: Db): Mailer {
  return config.smtpUrl ? createSmtpMailer(config.smtpUrl, config.mailFrom) : createOutboxMailer(db);
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
      try {
        await transport.sendMail({ from, ...message });
      } catch (err) {
        // The relay refused or did not answer: not the caller's fault, and worth a retry (503 with
        // Retry-After, as every outage of a part svc depends on), never a 500. Callers that must not reveal
        // whether a mail was sent (password reset) catch this themselves.
        const unavailable = errorOf(
          COMMON_ERRORS,
          'MAIL_UNAVAILABLE',
          'the mail relay did not take the message; try again',
          { headers: { 'Retry-After': String(UNAVAILABLE_RETRY_AFTER_SECONDS) } },
        );
        // Kept for the log line (pino prints an error's cause): why the relay refused.
        throw Object.assign(unavailable, { cause: err });
      }
    },
  };
}
