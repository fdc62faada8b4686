import { ConfigError, loadConfig } from '../config.js';
import { openDatabase } from '../db/client.js';
import { createLogger } from '../log.js';
import { createStripeClient } from './stripe-processor.js';
import { reconcile } from './reconcile.js';
import { mailerFor } from '../mail/mailer.js';

// `npm run billing:reconcile [-- --full]`: checks every ledger invariant against the database
// (DATABASE_URL, or the PGlite in DATA_DIR: stop the server first, PGlite is single-process) and, when
// STRIPE_SECRET_KEY is set, grants anything a lost webhook missed (and sends the receipts those grants owe). Prints what is wrong; exits 1 if
// anything is. From a stored checkpoint it checks only what was written since; the first run, or
// `--full`, checks the whole ledger and stores the checkpoint (docs/scale.md). Then deletes holds closed
// longer ago than the retention (src/billing/hold-retention.ts).

async function main(): Promise<number> {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`billing:reconcile: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const log = createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel);
  const database = await openDatabase({
    databaseUrl: config.databaseUrl,
    dataDir: config.dataDir,
    poolSize: 2,
    // An operator's whole-ledger check: its statements may rightly run longer than a request's.
    queryTimeoutMs: 0,
  });
  try {
    const stripe = config.stripe.secretKey
      ? createStripeClient(config.stripe.secretKey, config.stripe.apiBase)
      : null;
    const full = process.argv.includes('--full');
    const started = Date.now();
    // The mails a made-good top-up owes (its receipt) go where the server's would: SMTP or the dev outbox.
    const mail = { mailer: mailerFor(config, database.db), config, log };
    const report = await reconcile(database.db, log, stripe, {
      proPriceId: config.stripe.pricePro,
      full,
      mail,
    });
    const out = process.stdout;
    out.write(
      `billing:reconcile: storage ${database.kind}; Stripe ${stripe ? `checked (${report.fetched} objects)` : 'not configured'}\n`,
    );
    const { from, to } = report.checkpoint;
    out.write(
      report.mode === 'incremental'
        ? `  ledger checked from the checkpoint (rows after ${from}; checkpoint now ${to}) in ${Date.now() - started} ms\n`
        : `  whole ledger checked in ${Date.now() - started} ms${to !== null ? `; checkpoint stored at row ${to}` : ''}\n`,
    );
    if (report.prunedHolds > 0)
      out.write(`  deleted ${report.prunedHolds} holds closed over the retention\n`);
    for (const g of report.granted) out.write(`  granted missed ${g}\n`);
    for (const r of report.refunded) out.write(`  applied missed ${r}\n`);
    for (const r of report.refunds.shortfalls) {
      out.write(
        `  refund ${r.id} (client ${r.org_key}): ${r.shortfall} of ${r.credits} tokens already spent, not taken back\n`,
      );
    }
    for (const r of report.refunds.awaiting)
      out.write(`  refund ${r.id} awaits its payment ${r.payment_intent} (${r.amount_cents} cents)\n`);
    for (const d of report.disputes.shortfalls) {
      out.write(
        `  dispute ${d.id} (client ${d.org_key}): ${d.shortfall} of ${d.credits} tokens already spent, not taken back\n`,
      );
    }
    for (const d of report.disputes.awaiting)
      out.write(`  dispute ${d.id} awaits its payment ${d.payment_intent} (${d.amount_cents} cents)\n`);
    if (report.violations.length === 0) {
      out.write('  all ledger invariants hold\n');
      return 0;
    }
    for (const v of report.violations) {
      out.write(`  VIOLATION: ${v.check}\n`);
      for (const row of v.rows)
        out.write(
          `    ${JSON.stringify(row, (_k, x: unknown) => (typeof x === 'bigint' ? x.toString() : x))}\n`,
        );
    }
    return 1;
  } finally {
    await database.close();
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`billing:reconcile: failed: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
