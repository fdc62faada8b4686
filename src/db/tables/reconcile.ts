import { sql } from 'drizzle-orm';
import { bigint, check, integer, pgTable, text, timestamp } from 'drizzle-orm/pg-core';

// The reconciliation checkpoint (issue 24: a check that grows with new rows, not all rows;
// src/billing/reconcile-checkpoint.ts). Ledger rows are immutable (src/db/custom/immutable-ledger.sql),
// so the sum of every account's rows up to an id stays true forever: an incremental run adds the rows
// written since to these sums and compares with the stored balances of the accounts those rows touched.

/** One row: how far the stored sums reach. */
export const billingReconcileCheckpoint = pgTable(
  'billing_reconcile_checkpoint',
  {
    id: integer('id').primaryKey().default(1),
    /** Every ledger row with an id up to this one is in billing_reconcile_sums. */
    lastEntryId: bigint('last_entry_id', { mode: 'number' }).notNull(),
    /** Every usage record up to this id was matched to its hold and ledger row. */
    lastUsageRecordId: bigint('last_usage_record_id', { mode: 'number' }).notNull(),
    takenAt: timestamp('taken_at', { withTimezone: true }).notNull().defaultNow(),
  },
  (t) => [check('billing_reconcile_checkpoint_one_row', sql`${t.id} = 1`)],
);

/** Per account: the sum of its ledger rows (in minus out) up to the checkpoint's last entry. */
export const billingReconcileSums = pgTable('billing_reconcile_sums', {
  accountId: text('account_id').primaryKey(),
  ledgerSum: bigint('ledger_sum', { mode: 'number' }).notNull(),
});
