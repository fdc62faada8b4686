import type { Config } from './config.js';

// The start banner (it must tell the truth). Every line follows from the
// configuration the process actually runs with: /dev/mail is mentioned only when dev mode serves it,
// mail is "SMTP" only when SMTP_URL is set, and an unsafe choice says what to set instead.

export function startBanner(config: Config, where: { storage: string; listening: string }): string {
  const mail = config.smtpUrl
    ? 'SMTP (SMTP_URL)'
    : config.devMode
      ? `not sent: kept in the dev outbox at ${config.baseUrl}/dev/mail?to=<email> (set SMTP_URL to send)`
      : 'not sent: kept in the mail_outbox table only (set SMTP_URL to send)';
  const payments = config.stripe.secretKey
    ? 'Stripe (STRIPE_SECRET_KEY)'
    : config.devMode
      ? 'dev processor (/dev checkout, no money moves)'
      : 'off (no STRIPE_SECRET_KEY)';
  const lines = [
    `svc is running at ${config.baseUrl}  (listening on ${where.listening})`,
    // The first thing a person opens.
    `  sign in: ${config.v2Url}/account/login   register: ${config.v2Url}/account/register`,
    `  mode: ${config.production ? 'production (NODE_ENV=production)' : 'development'}`,
    `  origins: ${[...new Set([config.baseUrl, config.v2Url, config.lightUrl])].join(', ')}`,
    `  storage: ${where.storage}`,
    `  mail: ${mail}`,
    `  payments: ${payments}`,
    `  model: ${config.model.upstreamUrl ? `${config.model.id} via MODEL_UPSTREAM_URL` : 'svc-local (built in, no upstream)'}`,
    `  server keys: ${config.keyEncryptionKey ? 'sealed under KEY_ENCRYPTION_KEY' : 'stored unsealed in the database (set KEY_ENCRYPTION_KEY)'}`,
    config.devMode ? '  dev mode: on (/dev/* routes enabled; never in production)' : '  dev mode: off',
  ];
  return `\n${lines.join('\n')}\n\n`;
}
