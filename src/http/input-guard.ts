import type { IncomingMessage, ServerResponse } from 'node:http';
import { AppError, errorOf, COMMON_ERRORS } from './errors.js';

// PostgreSQL text and jsonb cannot hold U+0000 (SQLSTATE 22021 / 22P05), so a NUL anywhere in a request
// is a client mistake no route can store: without this guard it reached a query and came back as a 500
// (or, inside the membership guard's catch, a 503). Refused once, here, before any route (CONTRACT §3:
// no 5xx for a client mistake). Covers the URL (path parameters and query, %00) and parsed bodies.

const ENCODED_NUL = /%00/i;
/** Deep enough for any real body; deeper nesting is walked no further (and no route reads it). */
const MAX_DEPTH = 64;

export function hasNul(value: unknown): boolean {
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length) {
    const [v, depth] = stack.pop()!;
    if (typeof v === 'string') {
      if (v.includes('\u0000')) return true;
    } else if (v && typeof v === 'object' && depth < MAX_DEPTH) {
      for (const [k, child] of Object.entries(v)) {
        if (k.includes('\u0000')) return true;
        stack.push([child, depth + 1]);
      }
    }
  }
  return false;
}

/**
 * 400 VALIDATION_ERROR for a NUL in the URL or the parsed body. `skipBodyOn`: paths whose body is
 * verified as raw bytes by its sender's signature (a webhook) and judged by its own route. Mounted at
 * the root (so the URL's path is the route's path); Express middleware, and a step of the chat call's
 * own entry on plain node objects (src/models/entry.ts).
 */
export function rejectNulCharacters(skipBodyOn: string[] = []) {
  return (
    req: IncomingMessage & { originalUrl?: string; body?: unknown },
    _res: ServerResponse,
    next: (err?: unknown) => void,
  ) => {
    const url = req.originalUrl ?? req.url ?? '';
    const where =
      ENCODED_NUL.test(url) || url.includes('\u0000')
        ? 'url'
        : !skipBodyOn.includes(url.split('?')[0]!) && hasNul(req.body)
          ? 'body'
          : null;
    next(where ? nulFound(where) : undefined);
  };
}

function nulFound(where: 'url' | 'body'): AppError {
  const message = 'must not contain a NUL character';
  return errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', `${where}: ${message}`, {
    errors: [{ path: where, message }],
  });
}
