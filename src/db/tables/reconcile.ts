import { sql } from 'drizzle-orm';
import { bigint, check, integer, numeric, pgTable, timestamp } from 'drizzle-orm/pg-core';

// The reconciliation checkpoint (a check that grows with new rows, not all rows;
// src/billing/reconcile-checkpoint.ts). Ledger rows are immutable (src/db/custom/immutable-ledger.sql),
// so a number computed from the rows up to an id stays true forever: an incremental run adds the rows
// written since to the stored checksum and compares it with the same weighted sum of the balances.

/** One row: how far the checkpoint reaches, and the ledger's weighted sum up to there. */
export const billingReconcileCheckpoint = pgTable(
  'billing_reconcile_checkpoint',
  {
    id: integer('id').primaryKey().default(1),
    /** Every ledger row with an id up to this one is in ledger_checksum. */
    lastEntryId: bigint('last_entry_id', { mode: 'number' }).notNull(),
    /** Every usage record up to this id was matched to its hold and ledger row. */
    lastUsageRecordId: bigint('last_usage_record_id', { mode: 'number' }).notNull(),
    /**
     * Σ over accounts of w(account) × (the account's ledger rows up to last_entry_id, in minus out), with
     * w an odd 64-bit hash of the account id under checksum_seed (reconcile-checkpoint.ts). Exact
     * (numeric): nothing wraps.
     */
    ledgerChecksum: numeric('ledger_checksum').notNull(),
    /** Drawn at random by each full check that stores a checkpoint. */
    checksumSeed: bigint('checksum_seed', { mode: 'number' }).notNull(),
    takenAt: timestamp('taken_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [check('billing_reconcile_checkpoint_one_row', sql`${t.id} = 1`)],
);
