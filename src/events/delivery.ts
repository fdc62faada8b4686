import { sql } from 'drizzle-orm';
import { fetch, type Agent } from 'undici';
import { queryRows, type Db } from '../db/client.js';
import { decrypt } from '../crypto/hash.js';
import { guardedAgent, isGuardRefusal } from '../http/outbound-guard.js';
import { clientIdOf, unixOfStored } from '../ids.js';
import type { Logger } from '../log.js';
import { SIGNATURE_HEADER, signatureHeader } from './signature.js';

// Delivering outbound events (docs/billing.md "Outbound events"): at least once, from the
// durable outbox (./outbox.ts), by every svc process.
//
// A worker claims due deliveries with FOR UPDATE SKIP LOCKED and, in the same statement, moves their due
// time past the attempt's bound (CLAIM_SECONDS): the claim commits at once, the request runs outside any
// transaction, and its result is written only while the claim is still that attempt's. Another process
// skips a claimed row; a process that dies mid-attempt leaves the row to be claimed again when its claim
// lapses, so an event is delivered at least once and, beyond a receiver's timeout or a crash, once.
// Each attempt is bounded: connect CONNECT_TIMEOUT_MS, the whole answer ATTEMPT_TIMEOUT_MS, and the
// receiver's body is not read (only its status counts). Redirects are not followed (a 3xx is a failure).
// The target is checked at connect time (src/http/outbound-guard.ts): never a private, loopback or other
// special address, unless DEV_MODE.

export const CONNECT_TIMEOUT_MS = 5_000;
export const ATTEMPT_TIMEOUT_MS = 10_000;
/** A claim outlives its attempt's bound with room to write the result. */
const CLAIM_SECONDS = 60;
/** Attempts before a delivery is given up ('failed'): with a 30 s base, about 22 hours of retrying. */
export const MAX_ATTEMPTS = 10;
/** The longest wait between two attempts. */
const MAX_DELAY_MS = 6 * 60 * 60 * 1000;
const BATCH = 16;
export const POLL_INTERVAL_MS = 1_000;

/** The wait after failed attempt `n` (1-based): base × 3^(n−1), at most 6 h, plus up to 20 % jitter. */
export function retryDelayMs(baseMs: number, attempt: number, random = Math.random()): number {
  const delay = Math.min(MAX_DELAY_MS, baseMs * 3 ** (attempt - 1));
  return Math.round(delay * (1 + 0.2 * random));
}

interface Claimed {
  id: number;
  attempts: number;
  url: string;
  secret_sealed: string;
  event_id: string;
  org_key: string;
  type: string;
  data: unknown;
  created_at: Date | string;
}

async function claim(db: Db): Promise<Claimed[]> {
  const rows = await queryRows<Claimed & { id: unknown; attempts: unknown }>(
    db,
    sql`with due as (
          select id from webhook_deliveries
          where status = 'pending' and next_attempt_at <= now()
          order by next_attempt_at limit ${BATCH} for update skip locked),
        claimed as (
          update webhook_deliveries d
          set attempts = d.attempts + 1, last_attempt_at = now(),
              next_attempt_at = now() + make_interval(secs => ${CLAIM_SECONDS})
          from due where d.id = due.id
          returning d.id, d.attempts, d.event_id, d.endpoint_id)
        select c.id, c.attempts, w.url, w.secret_sealed, e.id as event_id, e.org_key, e.type, e.data, e.created_at
        from claimed c
        join webhook_endpoints w on w.id = c.endpoint_id
        join outbound_events e on e.id = c.event_id`,
  );
  return rows.map((r) => ({ ...r, id: Number(r.id), attempts: Number(r.attempts) }));
}

/** The body of an event as every delivery of it carries it (the same bytes on each retry). */
export function eventBody(e: {
  event_id: string;
  org_key: string;
  type: string;
  data: unknown;
  created_at: Date | string;
}) {
  return JSON.stringify({
    id: e.event_id,
    object: 'event',
    type: e.type,
    created: unixOfStored(e.created_at),
    client_id: clientIdOf(e.org_key),
    data: e.data,
  });
}

type Outcome = { ok: true; status: number } | { ok: false; status: number | null; error: string };

async function attempt(agent: Agent, encryptionKey: Buffer, d: Claimed): Promise<Outcome> {
  const body = eventBody(d);
  const t = Math.floor(Date.now() / 1000);
  try {
    const res = await fetch(d.url, {
      method: 'POST',
      dispatcher: agent,
      redirect: 'manual',
      signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
      headers: {
        'content-type': 'application/json',
        'user-agent': 'svc-webhooks/1',
        'svc-event-id': d.event_id,
        'svc-event-type': d.type,
        [SIGNATURE_HEADER]: signatureHeader(decrypt(encryptionKey, d.secret_sealed), t, body),
      },
      body,
    });
    // Only the status counts: the body is not read (no size to bound), and cancelling it frees the socket.
    await res.body?.cancel().catch(() => {});
    if (res.status >= 200 && res.status < 300) return { ok: true, status: res.status };
    return { ok: false, status: res.status, error: `HTTP ${Math.floor(res.status / 100)}xx` };
  } catch (err) {
    return { ok: false, status: null, error: describeFailure(err) };
  }
}

/**
 * Why an attempt failed, in one of a few classes (docs/events.md): never the receiver's text, a stack or
 * a resolver's message. `refused: not a public address` covers a name that does not resolve as well as
 * one that resolves to a private address, so the log is no DNS oracle for an owner probing internal names.
 */
function describeFailure(err: unknown): string {
  const e = err as { name?: string; cause?: { code?: string } } | undefined;
  if (isGuardRefusal(err)) return 'refused: not a public address';
  if (e?.name === 'TimeoutError' || e?.name === 'AbortError') return 'no answer';
  const code = e?.cause?.code ?? '';
  if (/^(ERR_TLS|ERR_SSL|CERT_|UNABLE_TO_|DEPTH_ZERO|SELF_SIGNED|HOSTNAME_MISMATCH)/.test(code))
    return 'TLS failure';
  return 'no answer';
}

/** Writes an attempt's result, only while the delivery is still claimed by that attempt. */
async function record(db: Db, d: Claimed, outcome: Outcome, retryBaseMs: number): Promise<void> {
  if (outcome.ok) {
    await db.execute(
      sql`update webhook_deliveries set status = 'delivered', delivered_at = now(), last_status = ${outcome.status},
            last_error = null
          where id = ${d.id} and attempts = ${d.attempts} and status = 'pending'`,
    );
    return;
  }
  const giveUp = d.attempts >= MAX_ATTEMPTS;
  const delay = retryDelayMs(retryBaseMs, d.attempts);
  await db.execute(
    sql`update webhook_deliveries
        set status = ${giveUp ? 'failed' : 'pending'}, last_status = ${outcome.status}, last_error = ${outcome.error},
            next_attempt_at = now() + make_interval(secs => ${delay / 1000})
        where id = ${d.id} and attempts = ${d.attempts} and status = 'pending'`,
  );
}

/** One pass: claims what is due and delivers it; returns how many were attempted. */
export async function deliverDue(parts: {
  db: Db;
  agent: Agent;
  encryptionKey: Buffer;
  retryBaseMs: number;
  log: Logger;
}): Promise<number> {
  const due = await claim(parts.db);
  await Promise.all(
    due.map(async (d) => {
      const outcome = await attempt(parts.agent, parts.encryptionKey, d);
      if (!outcome.ok)
        parts.log.info(
          {
            delivery: d.id,
            event: d.event_id,
            attempt: d.attempts,
            status: outcome.status,
            error: outcome.error,
          },
          'webhook delivery failed',
        );
      await record(parts.db, d, outcome, parts.retryBaseMs);
    }),
  );
  return due.length;
}

/**
 * The delivery worker of this process: a pass every POLL_INTERVAL_MS, passes back to back while there is
 * work, until `onClose` (which waits for the attempts in flight).
 */
export function startEventDelivery(parts: {
  db: Db;
  encryptionKey: Buffer;
  devMode: boolean;
  retryBaseMs: number;
  log: Logger;
  onClose(fn: () => Promise<void> | void): void;
}): void {
  // DEV_MODE delivers to any address (a receiver on this machine); otherwise only public ones.
  const agent = guardedAgent({
    connectTimeoutMs: CONNECT_TIMEOUT_MS,
    allow: parts.devMode ? () => true : undefined,
  });
  let running: Promise<void> | null = null;
  let closed = false;
  const pass = () => {
    if (running || closed) return;
    running = (async () => {
      while (!closed && (await deliverDue({ ...parts, agent })) > 0);
    })()
      .catch((err: unknown) => parts.log.warn({ err }, 'webhook delivery pass failed'))
      .finally(() => {
        running = null;
      });
  };
  const timer = setInterval(pass, POLL_INTERVAL_MS);
  timer.unref();
  parts.onClose(async () => {
    closed = true;
    clearInterval(timer);
    await running;
    await agent.close();
  });
}
