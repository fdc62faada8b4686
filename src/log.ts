import { pino, type Logger as PinoLogger } from 'pino';
import { PinoPretty } from 'pino-pretty';

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

export type LogFormat = 'auto' | 'json' | 'pretty';

/**
 * LOG_FORMAT (docs/deploying.md § Logs): `json` is one object a line, for machines; `pretty` one readable
 * line per request (pino-pretty, in-process: no worker thread), for people; `auto` is pretty on a terminal
 * in DEV_MODE and JSON everywhere else (a pipe, a container, a log shipper).
 */
export function resolveLogFormat(format: LogFormat, devMode: boolean, isTty = Boolean(process.stdout.isTTY)) {
  if (format !== 'auto') return format;
  return devMode && isTty ? 'pretty' : 'json';
}

export function createLogger(
  level: string,
  format: 'json' | 'pretty' = 'json',
  destination?: NodeJS.WritableStream,
): Logger {
  const options = { level, redact: { paths: REDACT, censor: '[redacted]' } };
  if (format === 'json') return destination ? pino(options, destination) : pino(options);
  const pretty = PinoPretty({
    ...(destination ? { destination } : {}),
    sync: true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname,req,res,responseTime',
    // A request line reads "GET /v1/clients 200 3 ms (id)"; other lines keep their message and fields.
    messageFormat: (log, messageKey) => {
      const req = log.req as { id?: string; method?: string; path?: string } | undefined;
      const res = log.res as { status?: number } | undefined;
      if (!req || !res) {
        const message = log[messageKey];
        return typeof message === 'string' ? message : message == null ? '' : JSON.stringify(message);
      }
      const aborted = log.aborted ? ' (client left)' : '';
      return `${req.method} ${req.path} ${res.status} ${String(log.responseTime)} ms${aborted}  ${req.id}`;
    },
  });
  return pino(options, pretty);
}
