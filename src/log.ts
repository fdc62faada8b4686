import { pino, type Logger as PinoLogger } from 'pino';

export type Logger = PinoLogger;

// Logs never contain a secret (STYLE: Edges): credentials travel in these places, and pino removes them
// before a line is written. Request URLs are logged without their query string (src/http/request-log.ts).
const REDACT = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["stripe-signature"]',
  'res.headers["set-cookie"]',
  '*.password',
  '*.token',
  '*.secret',
  '*.code',
  '*.refresh_token',
  '*.access_token',
  '*.device_code',
  '*.client_secret',
];

export function createLogger(level: string): Logger {
  return pino({ level, redact: { paths: REDACT, censor: '[redacted]' } });
}
