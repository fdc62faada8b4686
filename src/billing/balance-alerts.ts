import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import type { Logger } from '../log.js';
import type { Mailer } from '../mail/mailer.js';
import { balanceAlertMail } from '../mail/balance-alert-mail.js';
import { clientIdOf } from '../ids.js';
import { emitEvent } from '../events/outbox.js';
import { recordAuditEvent } from '../audit/record.js';
import type { AuditOrigin } from '../audit/context.js';
import {
  balanceWatch,
  setBalanceWatch,
  startCrossingWorker,
  WATCH_ALERT_EXHAUSTED,
  WATCH_ALERT_LOW,
  type BalanceCrossing,
} from './balance-crossings.js';
import { transaction } from '../db/transaction.js';

// Low-balance alerts (docs/billing.md "Low-balance alerts"). The owner sets a threshold T
// in tokens per client (default: off). When the client's balance falls from ≥ T to < T, and when it falls
// to 0 (model calls then fail with 402), the owner gets a mail and the client's webhook endpoints the
// event `balance.low` / `balance.exhausted`: once per crossing (./balance-crossings.ts), again after a
// top-up lifted the balance back to T.

export interface BalanceAlert {
  client_id: string;
  /** null: alerts off. 0: only the alert at 0. */
  threshold_credits: number | null;
}

export async function getBalanceAlert(db: Db, orgKey: string): Promise<BalanceAlert> {
  const exhausted = await balanceWatch(db, orgKey, WATCH_ALERT_EXHAUSTED);
  const low = await balanceWatch(db, orgKey, WATCH_ALERT_LOW);
  return { client_id: clientIdOf(orgKey), threshold_credits: exhausted === null ? null : (low ?? 0) };
}

/** Sets (or with null turns off) the client's alert threshold: the low watch at T, the exhausted one at 1. */
export async function setBalanceAlert(
  db: Db,
  orgKey: string,
  threshold: number | null,
  origin: AuditOrigin,
): Promise<BalanceAlert> {
  await transaction(db, async (t) => {
    // "At 0" is a fall from ≥ 1 to < 1.
    await setBalanceWatch(t, orgKey, WATCH_ALERT_EXHAUSTED, threshold === null ? null : 1);
    await setBalanceWatch(
      t,
      orgKey,
      WATCH_ALERT_LOW,
      threshold === null || threshold === 0 ? null : threshold,
    );
    await recordAuditEvent(t, {
      orgKey,
      action: 'alert.set',
      origin,
      target: { type: 'client', id: clientIdOf(orgKey) },
      details: { threshold_credits: threshold },
    });
  });
  return getBalanceAlert(db, orgKey);
}

interface OrgOwner {
  name: string;
  email: string;
  deleted_at: Date | string | null;
}

/**
 * One crossing: the event in `tx` (exactly once: the crossing is marked handled there), and the mail once
 * that has committed (at most once: mail is sent outside the transaction, since the dev outbox writes
 * through the pool and an embedded database has one connection). A deleted client's crossing (its
 * balance went back to the pool) alerts nobody.
 */
async function alert(
  tx: Db,
  c: BalanceCrossing,
  parts: { mailer: Mailer; portalUrl: string },
): Promise<(() => Promise<void>) | undefined> {
  const [org] = await queryRows<OrgOwner>(
    tx,
    sql`select o.name, u.email, o.deleted_at from orgs o join users u on u.id = o.owner_id where o.id = ${c.orgKey}`,
  );
  if (!org || org.deleted_at) return undefined;
  const low = c.purpose === WATCH_ALERT_LOW;
  const crossedAt = Math.floor(c.createdAt.getTime() / 1000);
  await emitEvent(tx, {
    orgKey: c.orgKey,
    type: low ? 'balance.low' : 'balance.exhausted',
    data: low
      ? { threshold_credits: c.threshold, balance_credits: c.balanceAfter, crossed_at: crossedAt }
      : { balance_credits: c.balanceAfter, crossed_at: crossedAt },
  });
  const mail = balanceAlertMail({
    to: org.email,
    orgName: org.name,
    kind: low ? 'low' : 'exhausted',
    threshold: c.threshold,
    balance: c.balanceAfter,
    link: `${parts.portalUrl}/account/clients/${clientIdOf(c.orgKey)}/billing`,
  });
  return () => parts.mailer.send(mail);
}

/** How often each process looks for crossings to alert on. */
export const ALERT_POLL_MS = 1_000;

/** The alert worker of this process (several processes share the crossings: SKIP LOCKED). */
export function startBalanceAlerts(parts: {
  db: Db;
  mailer: Mailer;
  portalUrl: string;
  log: Logger;
  onClose(fn: () => Promise<void> | void): void;
}): void {
  startCrossingWorker({
    db: parts.db,
    log: parts.log,
    name: 'balance alerts',
    purposes: [WATCH_ALERT_LOW, WATCH_ALERT_EXHAUSTED],
    handle: (tx, c) => alert(tx, c, parts),
    intervalMs: ALERT_POLL_MS,
    onClose: (fn) => parts.onClose(fn),
  });
}
