import type Stripe from 'stripe';
import type { Db } from '../db/client.js';
import type { Logger } from '../log.js';
import type { Violation } from './invariants.js';
import { pruneClosedHolds } from './hold-retention.js';
import { checkSinceCheckpoint, SETTLE_WINDOW_SECONDS } from './reconcile-checkpoint.js';
import { checkFull } from './reconcile-full.js';
import { disputeEventFor } from './disputes.js';
import { reversalReport } from './payment-reversals.js';
import type { StripeObject } from './stripe-object.js';
import { processEvent } from './webhooks.js';
import { SYSTEM_ORIGIN } from '../audit/context.js';
import type { GrantRules } from './subscription-events.js';
import type { AfterCommit, MailDeps } from './after-commit.js';

// Reconciliation: every ledger invariant checked against the database and, with Stripe
// configured, recent paid invoices, completed sessions and refunds re-fetched and applied through the webhook
// code, so a lost webhook is made good (disputes too). Idempotent: each object gets a synthetic event id of its own
// (`reconcile:<type>:<object id>`) and every grant is keyed by its processor object, so neither a
// second reconcile nor a late real webhook grants twice.

export interface ReconcileReport {
  violations: Violation[];
  fetched: number;
  granted: string[];
  /** Refunds and disputes re-fetched from Stripe and applied now (their webhooks were lost). */
  refunded: string[];
  /** Not violations but for a person to look at: refunds whose tokens were already spent (shortfall),
   * and refunds whose payment's grant has not arrived (applied when it does). */
  refunds: Awaited<ReturnType<typeof reversalReport>>;
  /** The same for disputes: withdrawals with a shortfall, and withdrawals waiting for their payment. */
  disputes: Awaited<ReturnType<typeof reversalReport>>;
  /**
   * How the ledger was checked (docs/scale.md): `full` (every row; a checkpoint is stored when nothing
   * is wrong) or `incremental` (rows since the checkpoint); the ledger ids the checkpoint moved between.
   */
  mode: 'full' | 'incremental';
  checkpoint: { from: number | null; to: number | null };
  /** Closed holds deleted for being older than the retention (hold-retention.ts). */
  prunedHolds: number;
}

const MAX_OBJECTS = 1_000;

function syntheticEvent(type: string, object: { id: string; created?: number }): Stripe.Event {
  return {
    id: `reconcile:${type}:${object.id}`,
    object: 'event',
    type,
    created: object.created ?? Math.floor(Date.now() / 1000),
    data: { object },
  } as unknown as Stripe.Event;
}

export async function reconcile(
  db: Db,
  log: Logger,
  stripe: Stripe | null,
  options: {
    sinceSeconds?: number;
    proPriceId?: string;
    /** Check the whole ledger even when a checkpoint exists (`--full`). */
    full?: boolean;
    /** SETTLE_WINDOW_SECONDS unless a test says otherwise. */
    settleWindowSeconds?: number;
    /**
     * Where the mails a made-good event owes go (a top-up's receipt, a failed auto top-up's notice), as
     * its webhook would have sent them; without it none is sent.
     */
    mail?: MailDeps;
  } = {},
): Promise<ReconcileReport> {
  // A missed event applied as its webhook would have been, and the mails it owes sent after its commit.
  const madeGood = async (event: Stripe.Event, rules: GrantRules) => {
    const after: AfterCommit[] = [];
    const result = await processEvent(db, log, event, rules, SYSTEM_ORIGIN, after);
    if (options.mail) for (const step of after) await step(options.mail);
    return result;
  };
  const granted: string[] = [];
  const refunded: string[] = [];
  let fetched = 0;
  // Without the configured Pro price no invoice can grant (fail closed); the CLI passes STRIPE_PRICE_PRO.
  const rules = { proPriceId: options.proPriceId ?? '' };
  if (stripe) {
    const gte = Math.floor(Date.now() / 1000) - (options.sinceSeconds ?? 35 * 24 * 3600);
    for await (const invoice of stripe.invoices.list({ status: 'paid', created: { gte }, limit: 100 })) {
      if (++fetched > MAX_OBJECTS) break;
      if (invoice.status !== 'paid') continue;
      const r = await madeGood(syntheticEvent('invoice.paid', invoice), rules);
      if (r.outcome === 'granted') granted.push(`invoice ${invoice.id}`);
    }
    for await (const session of stripe.checkout.sessions.list({
      status: 'complete',
      created: { gte },
      limit: 100,
    })) {
      if (++fetched > 2 * MAX_OBJECTS) break;
      if (session.mode !== 'payment' || session.payment_status !== 'paid') continue;
      const r = await madeGood(syntheticEvent('checkout.session.completed', session), rules);
      if (r.outcome === 'granted') granted.push(`checkout session ${session.id}`);
    }
    // Refunds whose webhooks were lost: each applied once (refunds.ts keys them by refund id).
    for await (const refund of stripe.refunds.list({ created: { gte }, limit: 100 })) {
      if (++fetched > 3 * MAX_OBJECTS) break;
      const r = await madeGood(syntheticEvent('refund.updated', refund), rules);
      if (r.outcome.startsWith('refunded')) refunded.push(`refund ${refund.id}`);
    }
    // Disputes whose webhooks were lost: applied as the event their state stands for (disputes.ts),
    // each take-back and give-back once per dispute id.
    for await (const dispute of stripe.disputes.list({ created: { gte }, limit: 100 })) {
      if (++fetched > 4 * MAX_OBJECTS) break;
      const type = disputeEventFor(dispute as unknown as StripeObject);
      if (!type) continue;
      const r = await madeGood(syntheticEvent(type, dispute), rules);
      if (r.outcome.startsWith('dispute_withdrawn') || r.outcome === 'dispute_reinstated')
        refunded.push(`dispute ${dispute.id}`);
    }
  }
  // Invariants last, so grants just made are checked too: from the checkpoint when there is one (and no
  // --full), else the whole ledger (reconcile-full.ts), which then stores the checkpoint (and moves it
  // only while sound).
  const window = options.settleWindowSeconds ?? SETTLE_WINDOW_SECONDS;
  const since = options.full ? null : await checkSinceCheckpoint(db, window);
  let ledger: Pick<ReconcileReport, 'violations' | 'mode' | 'checkpoint'>;
  // Something wrong since the checkpoint: the full check names every account and row concerned.
  if (since && since.violations.length === 0) {
    ledger = {
      violations: since.violations,
      mode: 'incremental',
      checkpoint: { from: since.from.lastEntryId, to: since.to.lastEntryId },
    };
  } else {
    const { violations, checkpoint } = await checkFull(db, { store: true, windowSeconds: window });
    ledger = { violations, mode: 'full', checkpoint: { from: null, to: checkpoint?.lastEntryId ?? null } };
  }
  // Retention after the check: a hold is deleted only once the check has seen it (docs/scale.md).
  const prunedHolds = ledger.violations.length === 0 ? await pruneClosedHolds(db) : 0;
  return {
    ...ledger,
    prunedHolds,
    fetched,
    granted,
    refunded,
    refunds: await reversalReport(db, 'refunds'),
    disputes: await reversalReport(db, 'disputes'),
  };
}
