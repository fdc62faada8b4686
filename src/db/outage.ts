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

/** A probe's answer stands this long: during an outage, a burst of failing requests asks once. */
const PROBE_REUSE_MS = 1_000;
const lastProbe = new WeakMap<Db, { at: number; answer: Promise<boolean> }>();

/** True when the database answers `select 1` within the timeout. Probes in quick succession share one. */
export function databaseAnswers(db: Db, timeoutMs = PROBE_TIMEOUT_MS): Promise<boolean> {
  const last = lastProbe.get(db);
  if (last && Date.now() - last.at < PROBE_REUSE_MS) return last.answer;
  const answer = probe(db, timeoutMs);
  lastProbe.set(db, { at: Date.now(), answer });
  return answer;
}

async function probe(db: Db, timeoutMs: number): Promise<boolean> {
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
 * `err` as the client should see it: an unexpected error while the database does not answer is the outage
 * (503 DATABASE_UNAVAILABLE with Retry-After); AppErrors and real faults come back unchanged.
 */
export async function asOutage(db: Db, err: unknown): Promise<unknown> {
  if (err instanceof AppError || (err as { status?: unknown })?.status !== undefined) return err;
  const answers = await databaseAnswers(db).catch(() => true);
  return answers ? err : databaseUnavailable();
}

/**
 * Error middleware: an unexpected error while the database does not answer becomes 503
 * DATABASE_UNAVAILABLE; AppErrors and real faults pass on unchanged to the error middleware.
 */
export function databaseOutageAs503(db: Db): ErrorRequestHandler {
  return (err, _req, _res, next) => {
    void asOutage(db, err).then(next);
  };
}
