import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { transaction } from '../db/transaction.js';
import type { Logger } from '../log.js';
import { SYSTEM_ORIGIN } from './context.js';
import { recordAuditEvent } from './record.js';

// `token.expired` (CONTRACT §11: credentials "created, revoked, expired"): a credential whose `expires_at`
// passes while it is still active gets one event in its organization's log, written by a sweep every
// process runs, not by the credential's first use after its expiry: a credential that is never used
// again still expires, and the model path's credential read stays free of audit writes
// (docs/decisions/0070-token-expired-written-by-a-sweep.md).
//
// Exactly once: a pass marks the credentials whose expiry it saw (`expiry_seen_at`) with one guarded
// UPDATE of rows it locked with SKIP LOCKED, and their events commit in that transaction; another
// process's pass skips the locked rows and then finds them marked. A credential revoked before its
// expiry never expired: it is marked, and no event is written.

/** How often each process looks for credentials that expired: the event follows the expiry within it. */
export const TOKEN_EXPIRY_SWEEP_MS = 5_000;
/** At most this many credentials a pass (a transaction); the next pass takes the rest at once. */
const BATCH = 100;

interface Expired {
  id: number;
  org_id: string;
  user_id: string;
  expires_at: Date | string;
  /** Whether the credential was still active when `expires_at` passed. */
  was_active: boolean;
}

const unixOf = (t: Date | string) => Math.floor(new Date(t).getTime() / 1000);

/**
 * One pass: marks up to `batch` credentials whose `expires_at` has passed and writes `token.expired` for
 * those that were active then. Returns how many it marked (a full batch: call again).
 */
export async function recordExpiredTokens(db: Db, batch = BATCH): Promise<number> {
  return transaction(db, async (tx) => {
    const seen = await queryRows<Expired>(
      tx,
      sql`update api_tokens t set expiry_seen_at = now()
          from (select id from api_tokens
                where expires_at is not null and expiry_seen_at is null and expires_at <= now()
                order by expires_at limit ${batch} for update skip locked) due
          where t.id = due.id
          returning t.id, t.org_id, t.user_id, t.expires_at,
            (t.revoked_at is null or t.revoked_at > t.expires_at) as was_active`,
    );
    for (const token of seen.filter((t) => t.was_active))
      await recordAuditEvent(tx, {
        orgKey: token.org_id,
        action: 'token.expired',
        target: { type: 'token', id: token.id },
        details: { holder_id: token.user_id, expires_at: unixOf(token.expires_at) },
        origin: SYSTEM_ORIGIN,
      });
    return seen.length;
  });
}

/** The sweep of this process, every TOKEN_EXPIRY_SWEEP_MS, until the process closes. */
export function startTokenExpirySweep(parts: {
  db: Db;
  log: Logger;
  onClose(fn: () => Promise<void> | void): void;
  intervalMs?: number;
}): void {
  let running: Promise<void> | null = null;
  let closed = false;
  const drain = async () => {
    while (!closed && (await recordExpiredTokens(parts.db)) === BATCH);
  };
  const pass = () => {
    if (running || closed) return;
    running = drain()
      .catch((err: unknown) => parts.log.warn({ err }, 'token expiry sweep failed; tried again later'))
      .finally(() => {
        running = null;
      });
  };
  const timer = setInterval(pass, parts.intervalMs ?? TOKEN_EXPIRY_SWEEP_MS);
  timer.unref();
  parts.onClose(async () => {
    closed = true;
    clearInterval(timer);
    await running;
  });
}
