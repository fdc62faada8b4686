import type { ErrorRequestHandler } from 'express';
import { sql } from 'drizzle-orm';
import type { Db } from './client.js';
import { AppError, databaseUnavailable } from '../http/errors.js';

// A database outage under a running server answers 503 DATABASE_UNAVAILABLE (with Retry-After) on the
// `/v1` routes, never 500 (CONTRACT §3: 5xx only for server faults, and an outage is a state the
// client can wait out). Authenticated routes already fail closed in the membership guard
// (Authentication 5, 6); this covers the rest: registration, sign-in, reset, verification, the device
// routes, the webhook, and a database lost between the guard and the route's own work.
//
// An unexpected error is classified by asking the database the question /readyz asks (`select 1`), not
// by matching driver messages (STYLE: never match errors by message text; pg and PGlite word them
// differently): when the database does not answer, the error was the outage; when it does, the error
// was a real fault and stays a 500 for the log. A request that failed in a transaction was rolled back
// by it, so a 503 never leaves half a state change behind.

/** How long the probe waits: a database that cannot answer `select 1` in this time is not answering. */
const PROBE_TIMEOUT_MS = 2_000;

/** True when the database answers `select 1` within the timeout. */
export async function databaseAnswers(db: Db, timeoutMs = PROBE_TIMEOUT_MS): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), timeoutMs);
  });
  try {
    return await Promise.race([
      db.execute(sql`select 1`).then(
        () => true,
        () => false,
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Error middleware for a router's `/v1` routes: an unexpected error while the database does not answer
 * becomes 503 DATABASE_UNAVAILABLE; AppErrors and real faults pass on unchanged to the error middleware.
 */
export function databaseOutageAs503(db: Db): ErrorRequestHandler {
  return (err, _req, _res, next) => {
    if (err instanceof AppError || (err as { status?: unknown })?.status !== undefined) {
      next(err);
      return;
    }
    databaseAnswers(db).then(
      (answers) => next(answers ? err : databaseUnavailable()),
      () => next(err),
    );
  };
}
